// Runs kernel programs without a compiler: each instruction is applied to a tile of elements
// at a time, so dispatch costs once per instruction per tile, not per element.
#include <cstring>
#include <vector>

#include "compiler/compiled_kernel.h"
#include "compiler/kernel_prelude.h"

namespace lt::compiler {

namespace {

constexpr int64_t kTile = 256;

template <class F, class T>
void apply(const Instr& instr, const void* const* regs, void* dst, int64_t n) {
  F f;
  T* out = static_cast<T*>(dst);
  const T* a = static_cast<const T*>(regs[instr.args[0]]);
  if (instr.args[1] < 0) {
    if constexpr (requires { f(a[0]); }) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i]);
    }
    return;
  }
  const T* b = static_cast<const T*>(regs[instr.args[1]]);
  if (instr.args[2] < 0) {
    if constexpr (requires { f(a[0], b[0]); }) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
    }
    return;
  }
  const T* c = static_cast<const T*>(regs[instr.args[2]]);
  if constexpr (requires { f(a[0], b[0], c[0]); }) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i], c[i]);
  }
}

template <class T>
void apply_op(const Instr& instr, const void* const* regs, void* dst, int64_t n) {
  switch (instr.op) {
#define LT_UNARY(Name, name, expr, ref) \
  case ir::OpKind::Name:                \
    return apply<lt_kernel::Name##Fn, T>(instr, regs, dst, n);
#define LT_BINARY LT_UNARY
#define LT_TERNARY LT_UNARY
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY
    default:
      break;
  }
}

template <class To, class From>
void convert(const void* src, void* dst, int64_t n) {
  const From* in = static_cast<const From*>(src);
  To* out = static_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<To>(in[i]);
}

template <class T>
void fill(void* dst, double value, int64_t n) {
  T* out = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(value);
}

class InterpretedKernel final : public CompiledKernel {
 public:
  explicit InterpretedKernel(KernelProgram program) : program_(std::move(program)) {}

  void run(const void* const* inputs, void* const* outputs, const double* scalars,
           int64_t n) const override {
    const size_t num_regs = program_.instrs.size();
    thread_local std::vector<double> storage;  // 8 bytes per element holds either dtype
    thread_local std::vector<const void*> regs;
    if (storage.size() < num_regs * kTile) storage.resize(num_regs * kTile);
    regs.resize(num_regs);
    for (int64_t begin = 0; begin < n; begin += kTile) {
      const int64_t count = std::min(kTile, n - begin);
      for (size_t r = 0; r < num_regs; ++r) {
        const Instr& instr = program_.instrs[r];
        void* slot = storage.data() + r * kTile;
        const bool f32 = instr.dtype == DType::f32;
        switch (instr.kind) {
          case InstrKind::Input:
            regs[r] =
                static_cast<const char*>(inputs[instr.index]) + begin * dtype_size(instr.dtype);
            continue;
          case InstrKind::Scalar:
          case InstrKind::Constant: {
            double value = instr.kind == InstrKind::Scalar ? scalars[instr.index] : instr.constant;
            f32 ? fill<float>(slot, value, count) : fill<double>(slot, value, count);
            break;
          }
          case InstrKind::Op:
            if (instr.op == ir::OpKind::Cast) {
              DType from = program_.instrs[instr.args[0]].dtype;
              const void* src = regs[instr.args[0]];
              if (f32) {
                from == DType::f32 ? convert<float, float>(src, slot, count)
                                   : convert<float, double>(src, slot, count);
              } else {
                from == DType::f32 ? convert<double, float>(src, slot, count)
                                   : convert<double, double>(src, slot, count);
              }
            } else {
              f32 ? apply_op<float>(instr, regs.data(), slot, count)
                  : apply_op<double>(instr, regs.data(), slot, count);
            }
            break;
        }
        regs[r] = slot;
      }
      // Stores come after every load of the tile, so an output may alias an input.
      for (size_t k = 0; k < program_.outputs.size(); ++k) {
        const size_t size = dtype_size(program_.instrs[program_.outputs[k]].dtype);
        std::memmove(static_cast<char*>(outputs[k]) + begin * size, regs[program_.outputs[k]],
                     count * size);
      }
    }
  }

  const char* method() const override { return "interpreter"; }

 private:
  KernelProgram program_;
};

}  // namespace

std::shared_ptr<CompiledKernel> make_interpreted_kernel(const KernelProgram& program) {
  return std::make_shared<InterpretedKernel>(program);
}

}  // namespace lt::compiler
