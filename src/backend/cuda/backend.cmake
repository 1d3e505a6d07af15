# The CUDA device kind (lazytensor_add_backend(cuda) in the top CMakeLists.txt): the driver API
# table, cuBLASLt's for products, the device as the offload backend's runtime, the kernels' CUDA source with NVRTC to
# compile it, and the registration. The driver and NVRTC are opened with dlopen when asked, so
# the build needs no CUDA and runs where there is none.
target_sources(
  lazytensor
  PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cublaslt.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cuda_device.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cuda_driver.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cuda_registration.cpp
          ${CMAKE_CURRENT_LIST_DIR}/cuda_source.cpp)
target_link_libraries(lazytensor PRIVATE ${CMAKE_DL_LIBS})
