#pragma once
// One renderer for fused kernel programs, in each target's dialect: the body (one statement per
// instruction, over the kernel prelude's functors, so every target computes the same
// expressions as the interpreter) is shared; the dialect spells the signature, the loop over
// the elements and how scalars are read. The prelude itself is the target's (the CPU's
// kernel_prelude.h; the CUDA target compiles the same one through a shim of builtins; OpenCL C
// has its own, backend/opencl/opencl_prelude.cpp).
#include <string>

#include "compiler/kernel_program.h"

namespace lt::backend {

enum class KernelDialect {
  // C++ for the system compiler: extern "C" void f(const void* const* in, void* const* out,
  // const double* s, long start, long n), a loop over [0, n), scalars hoisted.
  cpu,
  // CUDA C++ for NVRTC: extern "C" __global__ void f(const T* in0, ..., T* out0, ...,
  // const double* s, long long start, long long n), a grid-stride loop, scalars read where used.
  // No __restrict__ on the arrays: an in-place update's output is an input's array.
  cuda,
  // OpenCL C 1.2: __kernel void f(__global const T* in0, ..., __global T* out0, ..., scalars,
  // long start, long n), a grid-stride loop. Scalars are passed by value (double s0, ...) while
  // they fit the arguments every device takes (opencl_scalars_by_value), else as one array
  // (__global const double* s) read where used. bool is stored as uchar.
  opencl,
};

// A dtype's element type in memory and in registers, in the dialect.
std::string storage_type(DType dtype, KernelDialect dialect);
std::string register_type(DType dtype, KernelDialect dialect);
// An element of storage, `element`, loaded into a register of its dtype; and a register value
// of any type, `value`, converted to the dtype and stored, as a Cast kernel converts it.
std::string load_expression(DType dtype, const std::string& element, KernelDialect dialect);
std::string store_expression(DType dtype, const std::string& value, KernelDialect dialect);

// Whether an OpenCL kernel of `program` takes its scalars by value.
bool opencl_scalars_by_value(const compiler::KernelProgram& program);

// `program` as one function named `symbol` (the prelude not included). Throws lt::Error for an
// op the program's dtypes have no kernel for.
std::string render_kernel(const compiler::KernelProgram& program, const std::string& symbol,
                          KernelDialect dialect);

}  // namespace lt::backend
