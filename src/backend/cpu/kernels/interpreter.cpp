// Runs kernel programs without a compiler: each instruction is applied to a tile of elements
// at a time, so dispatch costs once per instruction per tile, not per element. The dtype
// dispatch happens once, when the kernel is built: each instruction gets the function for its
// dtypes, and a dtype or op without a kernel is an error then rather than at run time.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/cpu/kernels/kernel_prelude.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt::backend::cpu {

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

// The op applied to registers of dtype T (a storage type). Registers wider than the dtype
// (bf16's f32) round each result to it, as PyTorch rounds every bf16 op's result.
template <class F, class T>
void apply_op(const Instr& instr, const void* const* regs, void* dst, int64_t n) {
  using R = RegisterOf<T>;
  apply<F, R>(instr, regs, dst, n);
  if constexpr (!std::is_same_v<R, T>) {
    R* out = static_cast<R*>(dst);
    for (int64_t i = 0; i < n; ++i) out[i] = ElementTraits<T>::cast(out[i]);
  }
}

using OpFn = void (*)(const Instr& instr, const void* const* regs, void* dst, int64_t n);
using ConvertFn = void (*)(const void* src, void* dst, int64_t n);
using FillFn = void (*)(void* dst, double value, int64_t n);

// The kernel of `op` for dtype T, or null where the op has none for T's kind of element
// (ir::element_kinds): only the functions that exist are instantiated.
template <class T>
OpFn op_function(ir::OpKind op) {
  constexpr uint8_t kind = ir::element_kind(dtype_info_of<T>().dtype);
  switch (op) {
#define LT_UNARY(Name, name, expr, ref)                                \
  case ir::OpKind::Name:                                               \
    if constexpr ((ir::element_kinds(ir::OpKind::Name) & kind) != 0) { \
      return apply_op<lt_kernel::Name##Fn, T>;                         \
    } else {                                                           \
      return nullptr;                                                  \
    }
#define LT_BINARY LT_UNARY
#define LT_TERNARY LT_UNARY
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY
    default:
      return nullptr;
  }
}

// Memory to registers and back, for dtypes whose registers differ from their storage.
template <class T>
void load(const void* src, void* dst, int64_t n) {
  const T* in = static_cast<const T*>(src);
  RegisterOf<T>* out = static_cast<RegisterOf<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = load_element(in[i]);
}

template <class T>
void store(const void* src, void* dst, int64_t n) {
  const RegisterOf<T>* in = static_cast<const RegisterOf<T>*>(src);
  T* out = static_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = store_element<T>(in[i]);
}

// Registers of dtype From to registers of dtype To.
template <class To, class From>
void convert(const void* src, void* dst, int64_t n) {
  const RegisterOf<From>* in = static_cast<const RegisterOf<From>*>(src);
  RegisterOf<To>* out = static_cast<RegisterOf<To>*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = ElementTraits<To>::cast(in[i]);
}

// A number given to an op, in the op's registers. A bf16 or f16 op's number is already one of
// its dtype's values (rounded when traced, ir::scalar_value), so widening it is exact.
template <class T>
void fill(void* dst, double value, int64_t n) {
  RegisterOf<T>* out = static_cast<RegisterOf<T>*>(dst);
  const RegisterOf<T> v = std::is_same_v<RegisterOf<T>, T> ? ElementTraits<T>::cast(value)
                                                           : static_cast<RegisterOf<T>>(value);
  for (int64_t i = 0; i < n; ++i) out[i] = v;
}

// Iota: the positions first, first + 1, ... in registers of T.
template <class T>
void positions(void* dst, int64_t first, int64_t n) {
  RegisterOf<T>* out = static_cast<RegisterOf<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<RegisterOf<T>>(first + i);
}

// StochasticRound to bf16 from registers of dtype From, with the key in f64 registers.
template <class From>
void round_stochastic(const void* src, const void* key, void* dst, int64_t first, int64_t n,
                      int half) {
  const RegisterOf<From>* in = static_cast<const RegisterOf<From>*>(src);
  const double* keys = static_cast<const double*>(key);
  float* out = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = lt_kernel::lt_round_bf16_stochastic(in[i], keys[i],
                                                 static_cast<unsigned int>(first + i), half);
  }
}

// Bernoulli draws in registers of T, with the key and the probability in f64 registers.
template <class T>
void draw_bernoulli(const void* key, const void* probability, void* dst, int64_t first, int64_t n) {
  const double* keys = static_cast<const double*>(key);
  const double* probabilities = static_cast<const double*>(probability);
  RegisterOf<T>* out = static_cast<RegisterOf<T>*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    out[i] = lt_kernel::lt_bernoulli<RegisterOf<T>>(keys[i], probabilities[i],
                                                    static_cast<unsigned int>(first + i));
  }
}

// How one instruction runs, chosen for its dtypes when the kernel is built.
struct Step {
  size_t input_size = 0;        // Input: bytes per element in memory
  ConvertFn convert = nullptr;  // Input: memory to registers (null: read in place); Cast
  FillFn fill = nullptr;        // Scalar, Constant
  OpFn op = nullptr;            // every other op
  using PositionsFn = void (*)(void* dst, int64_t first, int64_t n);
  PositionsFn fill_positions = nullptr;  // Iota
  using RoundFn = void (*)(const void* src, const void* key, void* dst, int64_t first, int64_t n,
                           int half);
  RoundFn round = nullptr;  // StochasticRound
  using DrawFn = void (*)(const void* key, const void* probability, void* dst, int64_t first,
                          int64_t n);
  DrawFn draw = nullptr;  // Bernoulli
};

struct OutputStore {
  size_t size = 0;            // bytes per element in memory
  ConvertFn store = nullptr;  // registers to memory (null: copied)
};

Step make_step(const KernelProgram& program, const Instr& instr) {
  Step step;
  visit_dtype(instr.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (instr.kind) {
      case InstrKind::Input:
        step.input_size = sizeof(T);
        if constexpr (!std::is_same_v<RegisterOf<T>, T>) step.convert = load<T>;
        return;
      case InstrKind::Scalar:
      case InstrKind::Constant:
        step.fill = fill<T>;
        return;
      case InstrKind::Op:
        if (instr.op == ir::OpKind::Iota) {
          step.fill_positions = positions<T>;
          return;
        }
        if (instr.op == ir::OpKind::StochasticRound) {
          const DType from = program.instrs[instr.args[0]].dtype;
          const DType key = program.instrs[instr.args[1]].dtype;
          if (instr.dtype != DType::bf16 || !dtype_is_floating(from) || key != DType::f64) {
            throw Error(std::string("interpreter: StochasticRound from ") + dtype_name(from) +
                        " to " + dtype_name(instr.dtype) + " with a " + dtype_name(key) +
                        " key; it rounds a floating value to bf16 under an f64 key");
          }
          step.round = visit_dtype(from, [](auto tag) -> Step::RoundFn {
            using From = typename decltype(tag)::type;
            if constexpr (dtype_info_of<From>().floating) {
              return round_stochastic<From>;
            } else {
              return nullptr;
            }
          });
          return;
        }
        if (instr.op == ir::OpKind::Bernoulli) {
          const DType key = program.instrs[instr.args[0]].dtype;
          const DType probability = program.instrs[instr.args[1]].dtype;
          if constexpr (dtype_info_of<T>().floating) {
            if (key == DType::f64 && probability == DType::f64) {
              step.draw = draw_bernoulli<T>;
              return;
            }
          }
          throw Error(std::string("interpreter: Bernoulli draws of ") + dtype_name(instr.dtype) +
                      " under a " + dtype_name(key) + " key and a " + dtype_name(probability) +
                      " probability; they need a floating dtype and f64 arguments");
        }
        if (instr.op == ir::OpKind::Cast) {
          step.convert = visit_dtype(program.instrs[instr.args[0]].dtype, [](auto from) {
            return static_cast<ConvertFn>(convert<T, typename decltype(from)::type>);
          });
          return;
        }
        step.op = op_function<T>(instr.op);
        if (step.op == nullptr) {
          throw Error(std::string("interpreter: op ") + ir::op_info(instr.op).name +
                      " has no kernel for dtype " + dtype_name(instr.dtype));
        }
        return;
    }
  });
  return step;
}

OutputStore make_output_store(DType dtype) {
  return visit_dtype(dtype, [](auto tag) {
    using T = typename decltype(tag)::type;
    OutputStore out;
    out.size = sizeof(T);
    if constexpr (!std::is_same_v<RegisterOf<T>, T>) out.store = store<T>;
    return out;
  });
}

class InterpretedKernel final : public CompiledKernel {
 public:
  explicit InterpretedKernel(KernelProgram program) : program_(std::move(program)) {
    for (const Instr& instr : program_.instrs) steps_.push_back(make_step(program_, instr));
    for (int32_t reg : program_.outputs) {
      outputs_.push_back(make_output_store(program_.instrs[reg].dtype));
    }
  }

  void run(const void* const* inputs, void* const* outputs, const double* scalars, int64_t start,
           int64_t n) const override {
    const size_t num_regs = program_.instrs.size();
    thread_local std::vector<double> storage;  // 8 bytes per element holds any register
    thread_local std::vector<const void*> regs;
    if (storage.size() < num_regs * kTile) storage.resize(num_regs * kTile);
    regs.resize(num_regs);
    for (int64_t begin = 0; begin < n; begin += kTile) {
      const int64_t count = std::min(kTile, n - begin);
      for (size_t r = 0; r < num_regs; ++r) {
        const Instr& instr = program_.instrs[r];
        const Step& step = steps_[r];
        void* slot = storage.data() + r * kTile;
        switch (instr.kind) {
          case InstrKind::Input: {
            const char* src =
                static_cast<const char*>(inputs[instr.index]) + begin * step.input_size;
            if (step.convert == nullptr) {
              regs[r] = src;
              continue;
            }
            step.convert(src, slot, count);
            break;
          }
          case InstrKind::Scalar:
          case InstrKind::Constant:
            step.fill(slot, instr.kind == InstrKind::Scalar ? scalars[instr.index] : instr.constant,
                      count);
            break;
          case InstrKind::Op:
            if (instr.op == ir::OpKind::Iota) {
              step.fill_positions(slot, start + begin, count);
            } else if (step.draw != nullptr) {
              step.draw(regs[instr.args[0]], regs[instr.args[1]], slot, start + begin, count);
            } else if (step.round != nullptr) {
              step.round(regs[instr.args[0]], regs[instr.args[1]], slot, start + begin, count,
                         instr.index);
            } else if (step.op != nullptr) {
              step.op(instr, regs.data(), slot, count);
            } else {
              step.convert(regs[instr.args[0]], slot, count);  // a Cast
            }
            break;
        }
        regs[r] = slot;
      }
      // Stores come after every load of the tile, so an output may alias an input.
      for (size_t k = 0; k < outputs_.size(); ++k) {
        const OutputStore& out = outputs_[k];
        void* dst = static_cast<char*>(outputs[k]) + begin * out.size;
        const void* src = regs[program_.outputs[k]];
        if (out.store != nullptr) {
          out.store(src, dst, count);
        } else {
          std::memmove(dst, src, count * out.size);
        }
      }
    }
  }

  const char* method() const override { return "interpreter"; }

 private:
  KernelProgram program_;
  std::vector<Step> steps_;           // one per instruction
  std::vector<OutputStore> outputs_;  // one per output
};

}  // namespace

std::shared_ptr<CompiledKernel> make_interpreted_kernel(const KernelProgram& program) {
  return std::make_shared<InterpretedKernel>(program);
}

}  // namespace lt::backend::cpu
