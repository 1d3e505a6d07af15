#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ir/ops.h"
#include "lazytensor/dtype.h"

namespace lt::compiler {

// A fused kernel's body: straight-line code over registers, evaluated once per element of the
// kernel's iteration space. It knows nothing of sizes, strides or broadcasting (the launcher
// hands it contiguous arrays), so one program serves every shape.
enum class InstrKind : uint8_t { Input, Scalar, Constant, Op };

struct Instr {
  InstrKind kind;
  ir::OpKind op = ir::OpKind::kCount;  // for Op
  DType dtype;                         // the register's element type
  int32_t args[3] = {-1, -1, -1};      // operand registers, for Op
  // Input: input number; Scalar: scalar argument number; StochasticRound: which 16 of the
  // hash's 32 bits it takes (0 the upper, 1 the lower).
  int32_t index = 0;
  double constant = 0;  // Constant
};

// Reductions fold the program's single output; None stores every output element.
enum class ReduceKind : uint8_t { None, Sum, Mean, Max, Norm, ArgMax };

struct KernelProgram {
  std::vector<Instr> instrs;
  std::vector<int32_t> outputs;  // registers stored to output 0, 1, ...
  std::vector<DType> input_dtypes;
  int num_scalars = 0;
  ReduceKind reduce = ReduceKind::None;

  // The program's identity: byte-for-byte equal keys mean the same compiled code.
  std::string key() const;
  int num_inputs() const { return static_cast<int>(input_dtypes.size()); }
};

uint64_t hash_bytes(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ull);
inline uint64_t hash_string(const std::string& s) {
  return hash_bytes(s.data(), s.size());
}

}  // namespace lt::compiler
