# The CPU backend's sources (lazytensor_add_backend(cpu) in the top CMakeLists.txt).
target_sources(lazytensor PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cpu_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cpu_executable.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/opaque_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/stream.cpp
  ${CMAKE_CURRENT_LIST_DIR}/thread_pool.cpp
)
