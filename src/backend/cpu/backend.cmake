# The CPU backend's sources (lazytensor_add_backend(cpu) in the top CMakeLists.txt).
set(LT_CPU_DIR ${CMAKE_CURRENT_LIST_DIR})
set(LT_IR_DIR ${CMAKE_CURRENT_LIST_DIR}/../../ir)

# The kernel prelude is compiled into the interpreter and embedded, with the op semantics and
# the op table inlined, as text in every generated kernel source.
file(READ ${LT_CPU_DIR}/kernels/kernel_prelude.h LT_PRELUDE)
file(READ ${LT_IR_DIR}/op_semantics.h LT_OP_SEMANTICS)
file(READ ${LT_IR_DIR}/op_table.def LT_OP_TABLE)
string(REPLACE "#include \"ir/op_semantics.h\"" "${LT_OP_SEMANTICS}" LT_PRELUDE "${LT_PRELUDE}")
string(REPLACE "#include \"ir/op_table.def\"" "${LT_OP_TABLE}" LT_PRELUDE "${LT_PRELUDE}")
string(REPLACE "#pragma once" "" LT_PRELUDE "${LT_PRELUDE}")
configure_file(${LT_CPU_DIR}/kernels/kernel_prelude.cpp.in
               ${CMAKE_CURRENT_BINARY_DIR}/generated/kernel_prelude.cpp @ONLY)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${LT_CPU_DIR}/kernels/kernel_prelude.h
             ${LT_IR_DIR}/op_semantics.h ${LT_IR_DIR}/op_table.def)

target_sources(lazytensor PRIVATE
  ${LT_CPU_DIR}/cpu_backend.cpp
  ${LT_CPU_DIR}/cpu_executable.cpp
  ${LT_CPU_DIR}/gemm.cpp
  ${LT_CPU_DIR}/opaque_ops.cpp
  ${LT_CPU_DIR}/thread_pool.cpp
  ${LT_CPU_DIR}/kernels/codegen.cpp
  ${LT_CPU_DIR}/kernels/interpreter.cpp
  ${LT_CPU_DIR}/kernels/kernel_cache.cpp
  ${LT_CPU_DIR}/kernels/native_compiler.cpp
  ${CMAKE_CURRENT_BINARY_DIR}/generated/kernel_prelude.cpp
)

# Integer ops wrap on overflow in the interpreter and index_add as in generated kernels
# (native_compiler.cpp).
set_property(SOURCE ${LT_CPU_DIR}/kernels/interpreter.cpp ${LT_CPU_DIR}/opaque_ops.cpp APPEND
             PROPERTY COMPILE_OPTIONS -fwrapv)

# The kernels' workers: OpenMP's, the threads oneDNN's products run on (Debian's oneDNN is built
# on OpenMP), so that one set of threads serves both and neither set spins on the cores while
# the other computes. ThreadSanitizer cannot see libgomp's synchronization (libgomp is not
# instrumented), so a thread-sanitized build, and a build without OpenMP, use the pool's own.
if(NOT LAZYTENSOR_SANITIZE STREQUAL "thread")
  find_package(OpenMP COMPONENTS CXX)
endif()
if(OpenMP_CXX_FOUND)
  target_link_libraries(lazytensor PRIVATE OpenMP::OpenMP_CXX)
  set_property(SOURCE ${LT_CPU_DIR}/thread_pool.cpp APPEND PROPERTY COMPILE_DEFINITIONS
               LT_POOL_OPENMP=1)
endif()

