# The OpenCL device kind (lazytensor_add_backend(opencl) in the top CMakeLists.txt): so far the
# probe that says whether this machine has an ICD loader and a platform (PoCL on CPUs). The
# loader is opened with dlopen when asked, so the build needs no OpenCL.
target_sources(lazytensor PRIVATE ${CMAKE_CURRENT_LIST_DIR}/opencl_probe.cpp)
target_link_libraries(lazytensor PRIVATE ${CMAKE_DL_LIBS})
