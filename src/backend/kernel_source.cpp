// The body every target shares, and each dialect's signature and loop (kernel_source.h).
#include "backend/kernel_source.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "ir/dtype_traits.h"
#include "ir/ops.h"
#include "lazytensor/error.h"

namespace lt::backend {

using compiler::Instr;
using compiler::InstrKind;
using compiler::KernelProgram;

namespace {

// The dtype's row, for a dtype the generated code can hold.
const DTypeInfo& kernel_dtype(DType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  if (!info.has_kernels) throw_no_kernels(dtype);
  return info;
}

// `value`, a register of any type, converted to a register of `dtype`.
std::string cast(DType dtype, const std::string& value) {
  return std::string(kernel_dtype(dtype).c_cast) + "(" + value + ")";
}

std::string number(DType dtype, const std::string& value) {
  const DTypeInfo& info = kernel_dtype(dtype);
  if (!info.wide_register) return cast(dtype, value);
  return "static_cast<" + std::string(info.c_register) + ">(" + value + ")";
}

std::string literal(double value) {
  if (std::isnan(value)) return "__builtin_nan(\"\")";
  if (std::isinf(value)) return value > 0 ? "__builtin_inf()" : "-__builtin_inf()";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", value);  // exact
  return buf;
}

std::string reg(int32_t r) {
  return std::string("r") + std::to_string(r);
}

// Whether register r of a wide-register dtype (bf16) holds a value of the dtype: loads and op
// results do (every op's result is rounded); numbers and positions are at register precision.
bool holds_dtype_value(const KernelProgram& program, int32_t r) {
  const Instr& instr = program.instrs[r];
  return instr.kind == InstrKind::Input ||
         (instr.kind == InstrKind::Op && instr.op != ir::OpKind::Iota);
}

// Ops whose result is one of their value operands, or one with its sign changed: given
// operands that hold values of the dtype, the result holds one too and needs no rounding.
bool result_is_exact(const KernelProgram& program, const Instr& instr) {
  int first = 0;
  switch (instr.op) {
    case ir::OpKind::Where:
      first = 1;  // the condition is not a value of the result
      break;
    case ir::OpKind::Identity:
    case ir::OpKind::Neg:
    case ir::OpKind::Abs:
    case ir::OpKind::Relu:
    case ir::OpKind::Maximum:
    case ir::OpKind::Minimum:
    case ir::OpKind::Clamp:
      break;
    default:
      return false;
  }
  for (int a = first; a < 3 && instr.args[a] >= 0; ++a) {
    if (!holds_dtype_value(program, instr.args[a])) return false;
  }
  return true;
}

// Whether register r was rounded to its dtype in this kernel (a cast, an op's rounded result, a
// stochastic rounding), so that a NaN there is already quiet and its store needs no check.
bool rounded_in_kernel(const KernelProgram& program, int32_t r) {
  const Instr& instr = program.instrs[r];
  if (instr.kind != InstrKind::Op || instr.op == ir::OpKind::Iota) return false;
  if (instr.op == ir::OpKind::Cast || instr.op == ir::OpKind::StochasticRound ||
      instr.op == ir::OpKind::Bernoulli) {
    return true;
  }
  if (instr.op == ir::OpKind::Where) {
    // where(true, value, old), trace::overwrite's: the value it always selects.
    const Instr& condition = program.instrs[instr.args[0]];
    if (condition.kind == InstrKind::Constant && condition.constant != 0) {
      return rounded_in_kernel(program, instr.args[1]);
    }
  }
  return !result_is_exact(program, instr);
}

// The function's opening and its typed views of the input and output arrays, in0.. and out0...
std::string signature(const KernelProgram& program, const std::string& symbol,
                      KernelDialect dialect) {
  std::string out;
  if (dialect == KernelDialect::cuda) {
    out = "extern \"C\" __global__ void " + symbol + "(";
    for (int k = 0; k < program.num_inputs(); ++k) {
      out += "const " + std::string(kernel_dtype(program.input_dtypes[k]).c_storage) + "* in" +
             std::to_string(k) + ", ";
    }
    for (size_t k = 0; k < program.outputs.size(); ++k) {
      out += std::string(kernel_dtype(program.instrs[program.outputs[k]].dtype).c_storage) +
             "* out" + std::to_string(k) + ", ";
    }
    return out + "const double* __restrict__ s, long long start, long long n) {\n";
  }
  out = "extern \"C\" void " + symbol +
        "(const void* const* in, void* const* out, const double* s, long start, long n) {\n";
  for (int k = 0; k < program.num_inputs(); ++k) {
    const std::string t = kernel_dtype(program.input_dtypes[k]).c_storage;
    out += "  const " + t + "* in" + std::to_string(k) + " = static_cast<const " + t + "*>(in[" +
           std::to_string(k) + "]);\n";
  }
  for (size_t k = 0; k < program.outputs.size(); ++k) {
    const std::string t = kernel_dtype(program.instrs[program.outputs[k]].dtype).c_storage;
    out += "  " + t + "* out" + std::to_string(k) + " = static_cast<" + t + "*>(out[" +
           std::to_string(k) + "]);\n";
  }
  return out;
}

}  // namespace

std::string render_kernel(const KernelProgram& program, const std::string& symbol,
                          KernelDialect dialect) {
  const bool cuda = dialect == KernelDialect::cuda;
  std::string out = signature(program, symbol, dialect);
  // Constants are loop-invariant: hoisted. So are scalars on the CPU; on a GPU each is read
  // where the body needs it, so that hundreds of them (a multi-tensor optimizer's) do not all
  // take a register for the whole loop.
  std::string body;
  bool counts_positions = false;
  for (size_t r = 0; r < program.instrs.size(); ++r) {
    const Instr& instr = program.instrs[r];
    const DTypeInfo& info = kernel_dtype(instr.dtype);
    const std::string decl =
        "const " + std::string(info.c_register) + " " + reg(static_cast<int32_t>(r)) + " = ";
    switch (instr.kind) {
      // Numbers at register precision (a bf16 or f16 op's number was rounded to it when traced).
      case InstrKind::Scalar:
        if (cuda) {
          // A volatile read is not hoisted: NVVM otherwise lifts every scalar out of the loop,
          // and a kernel of hundreds (a multi-tensor optimizer's) spills them all.
          body += "    " + decl +
                  number(instr.dtype,
                         "((const volatile double*)s)[" + std::to_string(instr.index) + "]") +
                  ";\n";
        } else {
          out +=
              "  " + decl + number(instr.dtype, "s[" + std::to_string(instr.index) + "]") + ";\n";
        }
        break;
      case InstrKind::Constant:
        out += "  " + decl + number(instr.dtype, literal(instr.constant)) + ";\n";
        break;
      case InstrKind::Input: {
        const std::string element = "in" + std::to_string(instr.index) + "[i]";
        const std::string loaded =
            info.wide_register ? std::string(info.c_load) + "(" + element + ")" : element;
        body += "    " + decl + loaded + ";\n";
        break;
      }
      case InstrKind::Op: {
        if (instr.op == ir::OpKind::Cast) {
          body += "    " + decl + cast(instr.dtype, reg(instr.args[0])) + ";\n";
          break;
        }
        if (instr.op == ir::OpKind::Iota) {
          body += "    " + decl + number(instr.dtype, "start + i") + ";\n";
          break;
        }
        if (instr.op == ir::OpKind::StochasticRound) {
          body += "    " + decl + "lt_kernel::lt_round_bf16_stochastic(" + reg(instr.args[0]) +
                  ", " + reg(instr.args[1]) + ", position, " + std::to_string(instr.index) + ");\n";
          counts_positions = true;
          break;
        }
        if (instr.op == ir::OpKind::Bernoulli) {
          if (!info.floating || program.instrs[instr.args[0]].dtype != DType::f64 ||
              program.instrs[instr.args[1]].dtype != DType::f64) {
            throw Error(std::string("codegen: Bernoulli draws of ") + info.name +
                        "; they need a floating dtype and f64 key and probability");
          }
          body += "    " + decl + "lt_kernel::lt_bernoulli<" + info.c_register + ">(" +
                  reg(instr.args[0]) + ", " + reg(instr.args[1]) + ", position);\n";
          counts_positions = true;
          break;
        }
        // An op computes only on the kinds of element it is defined for: anything else would
        // not compile, or would compute what no op is defined to.
        if (!ir::has_kernel(instr.op, instr.dtype)) {
          throw Error(std::string("codegen: op ") + ir::op_info(instr.op).name +
                      " has no kernel for dtype " + info.name);
        }
        std::string call = "lt_kernel::" + std::string(ir::op_info(instr.op).name) + "Fn{}(";
        for (int a = 0; a < 3 && instr.args[a] >= 0; ++a) {
          call += (a ? ", " : "") + reg(instr.args[a]);
        }
        call += ")";
        if (info.wide_register && !result_is_exact(program, instr)) {
          call = cast(instr.dtype, call);  // rounded to the dtype
        }
        body += "    " + decl + call + ";\n";
        break;
      }
    }
  }
  // Every input element is loaded before any output element is stored, so in-place updates
  // (an output that is an input's array, at the same index) are safe; ivdep tells the
  // vectorizer there is no dependence between iterations, which is true for any such aliasing.
  // Random bits take the position modulo 2^32 from a counter of its own: computed from the
  // 64-bit index, it would keep the vector loop in 64-bit lanes (a quarter slower on bf16 AdamW).
  if (cuda) {
    // A grid-stride loop: any grid covers any n.
    out +=
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)gridDim.x * blockDim.x) {\n";
    if (counts_positions) {
      out += "    const unsigned int position = static_cast<unsigned int>(start + i);\n";
    }
    out += body;
  } else {
    if (counts_positions) out += "  unsigned int position = static_cast<unsigned int>(start);\n";
    out += std::string("#pragma GCC ivdep\n  for (long i = 0; i < n; ++i") +
           (counts_positions ? ", ++position" : "") + ") {\n" + body;
  }
  for (size_t k = 0; k < program.outputs.size(); ++k) {
    const DTypeInfo& info = dtype_info(program.instrs[program.outputs[k]].dtype);
    const std::string value = reg(program.outputs[k]);
    // A register that holds a value of the dtype is stored by dropping the bits it does not
    // have (storing rounds nothing then; one rounded here has no NaN to quiet either); others
    // are rounded on the way.
    std::string stored = value;
    if (info.wide_register) {
      const int32_t r = program.outputs[k];
      const char* store = rounded_in_kernel(program, r)   ? info.c_store_rounded
                          : holds_dtype_value(program, r) ? info.c_store_exact
                                                          : info.c_store;
      stored = std::string(store) + "(" + value + ")";
    }
    out += "    out" + std::to_string(k) + "[i] = " + stored + ";\n";
  }
  out += "  }\n}\n";
  return out;
}

}  // namespace lt::backend
