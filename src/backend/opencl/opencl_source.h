#pragma once
// The OpenCL target of the kernel renderer: OpenCL C 1.2 source for fused kernel programs. OpenCL
// C has no templates, namespaces or functor structs, so the CPU's C++ prelude cannot be compiled
// as it is: this target's prelude defines the same helpers as overloaded C functions, computing
// what the CPU computes bit for bit (the same polynomials with the same fused multiply-adds, the
// same conversions, random streams and 8-bit maps, whose tables are printed from the CPU's), and
// each op of ir/op_table.def as a function per register type whose body is the table's own
// expression.
#include <string>
#include <vector>

#include "compiler/kernel_program.h"

namespace lt::backend::opencl {

// The prelude, then each program as a __kernel named by `symbols` (backend/kernel_source.h's
// OpenCL dialect).
std::string generate_source(const std::vector<const compiler::KernelProgram*>& programs,
                            const std::vector<std::string>& symbols);

// The options every program is built with: IEEE division and square root (OpenCL allows 2.5 and
// 3 ulp otherwise), and no contraction of multiply-adds beyond the prelude's own.
const char* build_options();

}  // namespace lt::backend::opencl
