#pragma once
// Kernel programs built by hand for the renderer's dialect tests: a builder, and one program for
// every elementwise op in every dtype it has a kernel for, every cast, positions and random
// draws, and a multi-tensor update's hundreds of scalars.
#include <string>
#include <vector>

#include "compiler/kernel_program.h"
#include "ir/ops.h"
#include "lazytensor/dtype.h"

namespace lt::test {

using compiler::Instr;
using compiler::InstrKind;
using compiler::KernelProgram;
using ir::OpKind;

class ProgramBuilder {
 public:
  int32_t input(DType dtype) {
    program_.input_dtypes.push_back(dtype);
    return add({InstrKind::Input,
                OpKind::kCount,
                dtype,
                {-1, -1, -1},
                static_cast<int32_t>(program_.input_dtypes.size() - 1)});
  }
  int32_t scalar(DType dtype) {
    return add({InstrKind::Scalar, OpKind::kCount, dtype, {-1, -1, -1}, program_.num_scalars++});
  }
  int32_t op(OpKind kind, DType dtype, std::vector<int32_t> args, int32_t index = 0) {
    Instr instr{InstrKind::Op, kind, dtype};
    for (size_t a = 0; a < args.size(); ++a) instr.args[a] = args[a];
    instr.index = index;
    return add(instr);
  }
  KernelProgram finish(std::vector<int32_t> outputs) {
    program_.outputs = std::move(outputs);
    return program_;
  }

 private:
  int32_t add(const Instr& instr) {
    program_.instrs.push_back(instr);
    return static_cast<int32_t>(program_.instrs.size() - 1);
  }
  KernelProgram program_;
};

// One program per (elementwise op, dtype) with a kernel, and the instructions that are not
// table ops.
inline std::vector<KernelProgram> every_kernel() {
  std::vector<KernelProgram> programs;
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16,    DType::f16,
                          DType::i32, DType::i64, DType::boolean, DType::u8};
  for (int k = 0; k < static_cast<int>(OpKind::kCount); ++k) {
    const auto kind = static_cast<OpKind>(k);
    const int arity = ir::op_info(kind).arity;
    if (!ir::is_elementwise(kind) || kind == OpKind::Cast || kind == OpKind::Iota ||
        kind == OpKind::StochasticRound || kind == OpKind::Bernoulli) {
      continue;
    }
    for (DType dtype : dtypes) {
      if (!ir::has_kernel(kind, dtype)) continue;
      ProgramBuilder b;
      std::vector<int32_t> args;
      for (int a = 0; a < arity; ++a) args.push_back(a == 1 ? b.scalar(dtype) : b.input(dtype));
      programs.push_back(b.finish({b.op(kind, dtype, args)}));
    }
  }
  for (DType from : dtypes) {
    for (DType to : dtypes) {
      ProgramBuilder b;
      programs.push_back(b.finish({b.op(OpKind::Cast, to, {b.input(from)})}));
    }
  }
  {
    ProgramBuilder b;  // positions, a uniform draw, a Bernoulli mask, a stochastic rounding
    const int32_t seed = b.scalar(DType::f64), offset = b.scalar(DType::f64);
    const int32_t position = b.op(OpKind::Iota, DType::f64, {});
    const int32_t uniform = b.op(OpKind::Uniform, DType::f64, {seed, offset, position});
    const int32_t mask = b.op(OpKind::Bernoulli, DType::f32, {seed, b.scalar(DType::f64)});
    const int32_t rounded = b.op(OpKind::StochasticRound, DType::bf16, {b.input(DType::f32), seed});
    programs.push_back(b.finish({uniform, mask, rounded}));
  }
  {
    // A multi-tensor update's shape: 600 scalars, each used once, summed into one output.
    ProgramBuilder b;
    int32_t acc = b.input(DType::f32);
    for (int i = 0; i < 600; ++i) {
      acc =
          b.op(OpKind::Add, DType::f32,
               {b.op(OpKind::Mul, DType::f32, {acc, b.scalar(DType::f32)}), b.scalar(DType::f32)});
    }
    programs.push_back(b.finish({acc}));
  }
  return programs;
}

}  // namespace lt::test
