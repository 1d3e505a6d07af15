# The CUDA device kind (lazytensor_add_backend(cuda) in the top CMakeLists.txt): so far the
# probe that says whether this machine has a driver and a GPU, and the kernels' CUDA source with
# NVRTC to compile it. The driver and NVRTC are opened with dlopen when asked, so the build needs
# no CUDA and runs where there is none.
target_sources(lazytensor PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cuda_probe.cpp
               ${CMAKE_CURRENT_LIST_DIR}/cuda_source.cpp)
target_link_libraries(lazytensor PRIVATE ${CMAKE_DL_LIBS})
