# Finds the libraries behind the engine's matrix multiplies (src/backend/cpu/gemm.cpp) and
# defines the INTERFACE target lazytensor_gemm_libs with their include directories, libraries
# and compile definitions:
#   OpenBLAS (required: f64, and f32/bf16 without oneDNN): cblas.h and libopenblas.
#   oneDNN (optional: f32 and bf16 when present): dnnl.hpp and libdnnl; LT_HAVE_ONEDNN=1.
# Sets GemmLibraries_FOUND (OpenBLAS found) and LT_HAVE_ONEDNN. Use it with
# find_package(GemmLibraries) after adding this directory to CMAKE_MODULE_PATH.

# Debian installs OpenBLAS's cblas.h per threading variant under the multiarch include
# directory; the plain multiarch cblas.h may be another BLAS's (no openblas_get_config), so the
# variants come first. Other systems have include/openblas or plain include.
find_path(OPENBLAS_INCLUDE_DIR cblas.h
  HINTS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread
        /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
        /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-serial
  PATH_SUFFIXES openblas)
find_library(OPENBLAS_LIBRARY openblas)
find_path(ONEDNN_INCLUDE_DIR dnnl.hpp PATH_SUFFIXES oneapi/dnnl)
find_library(ONEDNN_LIBRARY dnnl)
mark_as_advanced(OPENBLAS_INCLUDE_DIR OPENBLAS_LIBRARY ONEDNN_INCLUDE_DIR ONEDNN_LIBRARY)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(GemmLibraries
  REQUIRED_VARS OPENBLAS_LIBRARY OPENBLAS_INCLUDE_DIR
  REASON_FAILURE_MESSAGE "install libopenblas-dev (and libdnnl-dev for oneDNN)")
if(ONEDNN_INCLUDE_DIR AND ONEDNN_LIBRARY)
  set(LT_HAVE_ONEDNN ON)
else()
  set(LT_HAVE_ONEDNN OFF)
endif()

# A plain (not IMPORTED) INTERFACE library: visible from every directory, and installable in
# the package's export set so that consumers of the static library get its link dependencies.
# Headers and definitions are for building the wrapper only.
if(GemmLibraries_FOUND AND NOT TARGET lazytensor_gemm_libs)
  add_library(lazytensor_gemm_libs INTERFACE)
  target_include_directories(lazytensor_gemm_libs SYSTEM INTERFACE
                             $<BUILD_INTERFACE:${OPENBLAS_INCLUDE_DIR}>)
  target_link_libraries(lazytensor_gemm_libs INTERFACE ${OPENBLAS_LIBRARY})
  if(LT_HAVE_ONEDNN)
    target_include_directories(lazytensor_gemm_libs SYSTEM INTERFACE
                               $<BUILD_INTERFACE:${ONEDNN_INCLUDE_DIR}>)
    target_link_libraries(lazytensor_gemm_libs INTERFACE ${ONEDNN_LIBRARY})
    target_compile_definitions(lazytensor_gemm_libs INTERFACE $<BUILD_INTERFACE:LT_HAVE_ONEDNN=1>)
  endif()
endif()
