// The CUDA dialect of the kernel renderer, checked without a GPU: every elementwise op of the
// op table in every dtype it has a kernel for, the casts, positions and random draws, and a
// kernel with the hundreds of scalars of a multi-tensor optimizer, rendered as CUDA C++ with the
// CPU's prelude and compiled by NVRTC to a CUBIN for sm_90. Each must compile with no spills and
// no stack, in at most 128 registers. Skipped where the toolkit's NVRTC is not installed.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_source.h"
#include "backend/kernel_source.h"
#include "compiler/kernel_program.h"
#include "ir/ops.h"
#include "kernel_programs.h"
#include "lazytensor/dtype.h"

namespace {

using lt::DType;
using lt::compiler::Instr;
using lt::compiler::InstrKind;
using lt::compiler::KernelProgram;
using lt::ir::OpKind;
using lt::test::every_kernel;
using lt::test::ProgramBuilder;

constexpr int kMaxRegisters = 128;

bool uses_sin_or_cos(const KernelProgram& program) {
  for (const Instr& instr : program.instrs) {
    if (instr.kind == InstrKind::Op && (instr.op == OpKind::Sin || instr.op == OpKind::Cos)) {
      return true;
    }
  }
  return false;
}

TEST(CudaCodegenTest, EveryKernelCompilesForSm90WithoutSpills) {
  std::string why;
  const std::optional<lt::backend::cuda::Nvrtc> nvrtc = lt::backend::cuda::Nvrtc::open(&why);
  if (!nvrtc) GTEST_SKIP() << why;
  const std::vector<KernelProgram> programs = every_kernel();
  std::vector<const KernelProgram*> pointers;
  std::vector<std::string> symbols;
  for (size_t i = 0; i < programs.size(); ++i) {
    pointers.push_back(&programs[i]);
    std::string name = "k";
    name += std::to_string(i);
    symbols.push_back(name);
  }
  const std::string source = lt::backend::cuda::generate_source(pointers, symbols);
  const lt::backend::cuda::CompileReport report = nvrtc->compile(source, "sm_90");
  ASSERT_TRUE(report.compiled) << "NVRTC " << nvrtc->version() << ":\n"
                               << report.log.substr(0, 4000);
  std::map<std::string, lt::backend::cuda::KernelReport> by_name;
  for (const auto& kernel : report.kernels) by_name[kernel.name] = kernel;
  ASSERT_EQ(by_name.size(), programs.size()) << report.log.substr(0, 2000);
  for (size_t i = 0; i < programs.size(); ++i) {
    const auto& kernel = by_name.at(symbols[i]);
    SCOPED_TRACE(
        symbols[i] + ":\n" +
        lt::backend::render_kernel(programs[i], symbols[i], lt::backend::KernelDialect::cuda)
            .substr(0, 1500));
    EXPECT_TRUE(kernel.reported);  // its registers and frame were read from ptxas's report
    EXPECT_EQ(kernel.spill_bytes, 0);
    // CUDA's sinf and cosf reduce a huge argument (Payne-Hanek) through a small local array.
    EXPECT_LE(kernel.stack_bytes, uses_sin_or_cos(programs[i]) ? 64 : 0);
    EXPECT_GT(kernel.registers, 0);
    EXPECT_LE(kernel.registers, kMaxRegisters);
  }
}

// The CUDA dialect spells a grid-stride loop and reads scalars where they are used; the CPU's
// hoists them before its loop and prefetches. Both carry the same statements.
TEST(CudaCodegenTest, DialectsShareTheBodyAndDifferInTheLoop) {
  ProgramBuilder b;
  const int32_t x = b.input(DType::f32);
  const KernelProgram program =
      b.finish({b.op(OpKind::Mul, DType::f32, {x, b.scalar(DType::f32)})});
  const std::string cpu = lt::backend::render_kernel(program, "f", lt::backend::KernelDialect::cpu);
  const std::string cuda =
      lt::backend::render_kernel(program, "f", lt::backend::KernelDialect::cuda);
  EXPECT_NE(cuda.find("__global__ void f(const float* in0, float* out0"), std::string::npos)
      << cuda;
  EXPECT_NE(cuda.find("i += (long long)gridDim.x * blockDim.x"), std::string::npos) << cuda;
  // The CPU's loop runs in blocks, each input prefetched ahead of its block where the CPU asks
  // for it (LT_SOFTWARE_PREFETCH).
  EXPECT_NE(cpu.find("for (long i = block; i < block_end; ++i)"), std::string::npos) << cpu;
  EXPECT_LT(cpu.find("lt_kernel::lt_prefetch_block(in0, block + lt_kernel::kPrefetchAhead)"),
            cpu.find("for (long i"))
      << cpu;
  EXPECT_EQ(cuda.find("prefetch"), std::string::npos) << cuda;
  // The scalar: before the CPU's loop, inside CUDA's.
  EXPECT_LT(cpu.find("s[0]"), cpu.find("for (long i"));
  EXPECT_GT(cuda.find("s[0]"), cuda.find("for (long long i"));
  EXPECT_NE(cpu.find("lt_kernel::MulFn{}(r0, r1)"), std::string::npos);
  EXPECT_NE(cuda.find("lt_kernel::MulFn{}(r0, r1)"), std::string::npos);
}

}  // namespace
