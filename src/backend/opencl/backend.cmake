# The OpenCL device kind (lazytensor_add_backend(opencl) in the top CMakeLists.txt): the backend,
# the probe that says whether this machine has an ICD loader and a device (PoCL on CPUs), and the
# OpenCL C source of the kernels and routines. The loader is opened with dlopen when asked, so
# the build needs no OpenCL.
target_sources(
  lazytensor
  PRIVATE ${CMAKE_CURRENT_LIST_DIR}/opencl_api.cpp
          ${CMAKE_CURRENT_LIST_DIR}/opencl_prelude.cpp
          ${CMAKE_CURRENT_LIST_DIR}/opencl_registration.cpp
          ${CMAKE_CURRENT_LIST_DIR}/opencl_source.cpp)
target_link_libraries(lazytensor PRIVATE ${CMAKE_DL_LIBS})
