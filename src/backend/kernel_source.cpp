// The body every target shares, and each dialect's signature and loop (kernel_source.h).
#include "backend/kernel_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

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

// OpenCL C's name for a C++ type of the dtype table.
std::string opencl_type(const std::string& type) {
  if (type == "long long") return "long";
  if (type == "unsigned short") return "ushort";
  if (type == "unsigned char") return "uchar";
  return type;
}

// A conversion or helper of the dtype table as the dialect spells it: OpenCL C has neither
// namespaces nor static_cast.
std::string spelled(const char* name, KernelDialect dialect) {
  std::string text = name;
  if (dialect != KernelDialect::opencl) return text;
  const std::string ns = "lt_kernel::";
  if (text.rfind(ns, 0) == 0) return text.substr(ns.size());
  const std::string cast = "static_cast<";
  if (text.rfind(cast, 0) == 0) {
    return std::string("(") + opencl_type(text.substr(cast.size(), text.size() - cast.size() - 1)) +
           ")";
  }
  return text;
}

// `value`, a register of any type, converted to a register of `dtype`.
std::string cast(DType dtype, const std::string& value, KernelDialect dialect) {
  return spelled(kernel_dtype(dtype).c_cast, dialect) + "(" + value + ")";
}

std::string number(DType dtype, const std::string& value, KernelDialect dialect) {
  const DTypeInfo& info = kernel_dtype(dtype);
  if (!info.wide_register) return cast(dtype, value, dialect);
  if (dialect == KernelDialect::opencl) {
    return "((" + register_type(dtype, dialect) + ")(" + value + "))";
  }
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

// A value of an 8-bit map read from stored codes: an f32 Dequantize{Signed,Unsigned}8 of the
// f32 cast of a u8 input. The CPU dialect decodes such codes a block at a time where the kernel
// prelude can (LT_DECODES_CODES).
struct StoredCodes {
  int32_t value;  // the Dequantize's register
  int32_t input;  // the input array of codes
  bool is_unsigned;
};

std::vector<StoredCodes> stored_codes(const KernelProgram& program) {
  std::vector<StoredCodes> found;
  for (size_t r = 0; r < program.instrs.size(); ++r) {
    const Instr& instr = program.instrs[r];
    const bool is_unsigned = instr.op == ir::OpKind::DequantizeUnsigned8;
    if (instr.kind != InstrKind::Op || instr.dtype != DType::f32 ||
        (instr.op != ir::OpKind::DequantizeSigned8 && !is_unsigned)) {
      continue;
    }
    const Instr& cast = program.instrs[instr.args[0]];
    if (cast.kind != InstrKind::Op || cast.op != ir::OpKind::Cast || cast.dtype != DType::f32) {
      continue;
    }
    const Instr& codes = program.instrs[cast.args[0]];
    if (codes.kind != InstrKind::Input || codes.dtype != DType::u8) continue;
    found.push_back({static_cast<int32_t>(r), codes.index, is_unsigned});
  }
  return found;
}

// The function's opening and its typed views of the input and output arrays, in0.. and out0...
std::string signature(const KernelProgram& program, const std::string& symbol,
                      KernelDialect dialect) {
  std::string out;
  if (dialect != KernelDialect::cpu) {
    const bool opencl = dialect == KernelDialect::opencl;
    const std::string array = opencl ? "__global " : "";
    out = (opencl ? "__kernel void " : "extern \"C\" __global__ void ") + symbol + "(";
    for (int k = 0; k < program.num_inputs(); ++k) {
      out += array + "const " + storage_type(program.input_dtypes[k], dialect) + "* in" +
             std::to_string(k) + ", ";
    }
    for (size_t k = 0; k < program.outputs.size(); ++k) {
      out += array + storage_type(program.instrs[program.outputs[k]].dtype, dialect) + "* out" +
             std::to_string(k) + ", ";
    }
    if (!opencl) return out + "const double* __restrict__ s, long long start, long long n) {\n";
    if (opencl_scalars_by_value(program)) {
      for (int k = 0; k < program.num_scalars; ++k) out += "double s" + std::to_string(k) + ", ";
    } else {
      out += "__global const double* s, ";
    }
    return out + "long start, long n) {\n";
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

// OpenCL kernels take no bool arrays (its size is the implementation's): bool is a byte there.
std::string storage_type(DType dtype, KernelDialect dialect) {
  const DTypeInfo& info = kernel_dtype(dtype);
  if (dialect != KernelDialect::opencl) return info.c_storage;
  return dtype == DType::boolean ? "uchar" : opencl_type(info.c_storage);
}
std::string register_type(DType dtype, KernelDialect dialect) {
  const DTypeInfo& info = kernel_dtype(dtype);
  return dialect == KernelDialect::opencl ? opencl_type(info.c_register) : info.c_register;
}

std::string load_expression(DType dtype, const std::string& element, KernelDialect dialect) {
  const DTypeInfo& info = kernel_dtype(dtype);
  if (info.wide_register) return spelled(info.c_load, dialect) + "(" + element + ")";
  if (dialect == KernelDialect::opencl && dtype == DType::boolean) return element + " != 0";
  return element;
}

std::string store_expression(DType dtype, const std::string& value, KernelDialect dialect) {
  const DTypeInfo& info = kernel_dtype(dtype);
  const std::string converted = cast(dtype, value, dialect);
  if (info.wide_register) return spelled(info.c_store, dialect) + "(" + converted + ")";
  if (dialect == KernelDialect::opencl && dtype == DType::boolean) {
    return "(uchar)(" + converted + ")";
  }
  return converted;
}

bool opencl_scalars_by_value(const KernelProgram& program) {
  // 8 bytes a scalar and a pointer, and the two counts, within the 1024 bytes of arguments
  // every OpenCL device takes.
  const size_t words = static_cast<size_t>(program.num_scalars) +
                       static_cast<size_t>(program.num_inputs()) + program.outputs.size() + 2;
  return words * 8 <= 1024;
}

std::string render_kernel(const KernelProgram& program, const std::string& symbol,
                          KernelDialect dialect) {
  const bool cuda = dialect == KernelDialect::cuda;
  const bool opencl = dialect == KernelDialect::opencl;
  const std::string helpers = opencl ? "" : "lt_kernel::";
  std::string out = signature(program, symbol, dialect);
  // Constants are loop-invariant: hoisted. So are scalars on the CPU and OpenCL's by value; on
  // a GPU each scalar of memory is read where the body needs it, so that hundreds of them (a
  // multi-tensor optimizer's) do not all take a register for the whole loop.
  std::string body;
  bool counts_positions = false;
  const std::vector<StoredCodes> decoded =
      dialect == KernelDialect::cpu ? stored_codes(program) : std::vector<StoredCodes>{};
  for (size_t r = 0; r < program.instrs.size(); ++r) {
    const Instr& instr = program.instrs[r];
    const DTypeInfo& info = kernel_dtype(instr.dtype);
    const std::string decl =
        "const " + register_type(instr.dtype, dialect) + " " + reg(static_cast<int32_t>(r)) + " = ";
    const std::string index = std::to_string(instr.index);
    switch (instr.kind) {
      // Numbers at register precision (a bf16 or f16 op's number was rounded to it when traced).
      case InstrKind::Scalar:
        if (cuda) {
          // A volatile read is not hoisted: NVVM otherwise lifts every scalar out of the loop,
          // and a kernel of hundreds (a multi-tensor optimizer's) spills them all.
          body += "    " + decl +
                  number(instr.dtype, "((const volatile double*)s)[" + index + "]", dialect) +
                  ";\n";
        } else if (opencl && !opencl_scalars_by_value(program)) {
          body += "    " + decl + number(instr.dtype, "s[" + index + "]", dialect) + ";\n";
        } else {
          const std::string read = opencl ? "s" + index : "s[" + index + "]";
          out += "  " + decl + number(instr.dtype, read, dialect) + ";\n";
        }
        break;
      case InstrKind::Constant:
        out += "  " + decl + number(instr.dtype, literal(instr.constant), dialect) + ";\n";
        break;
      case InstrKind::Input: {
        body += "    " + decl + load_expression(instr.dtype, "in" + index + "[i]", dialect) + ";\n";
        break;
      }
      case InstrKind::Op: {
        if (instr.op == ir::OpKind::Cast) {
          const Instr& from = program.instrs[instr.args[0]];
          const bool stores_code =
              dialect == KernelDialect::cpu && instr.dtype == DType::u8 &&
              from.kind == InstrKind::Op && from.dtype == DType::f32 &&
              (from.op == ir::OpKind::QuantizeSigned8 || from.op == ir::OpKind::QuantizeUnsigned8);
          if (stores_code) {
            const char* quantize = from.op == ir::OpKind::QuantizeSigned8
                                       ? "lt_kernel::lt_quantize_signed8_u8("
                                       : "lt_kernel::lt_quantize_unsigned8_u8(";
            body += "    " + decl + quantize + reg(from.args[0]) + ");\n";
            break;
          }
          body += "    " + decl + cast(instr.dtype, reg(instr.args[0]), dialect) + ";\n";
          break;
        }
        if (instr.op == ir::OpKind::Iota) {
          body += "    " + decl + number(instr.dtype, "start + i", dialect) + ";\n";
          break;
        }
        if (instr.op == ir::OpKind::StochasticRound) {
          body += "    " + decl + helpers + "lt_round_bf16_stochastic(" + reg(instr.args[0]) +
                  ", " + reg(instr.args[1]) + ", position, " + index + ");\n";
          counts_positions = true;
          break;
        }
        if (instr.op == ir::OpKind::Bernoulli) {
          if (!info.floating || program.instrs[instr.args[0]].dtype != DType::f64 ||
              program.instrs[instr.args[1]].dtype != DType::f64) {
            throw Error(std::string("codegen: Bernoulli draws of ") + info.name +
                        "; they need a floating dtype and f64 key and probability");
          }
          const std::string draw =
              std::string("(") + reg(instr.args[0]) + ", " + reg(instr.args[1]) + ", position)";
          body +=
              "    " + decl +
              (opencl ? cast(instr.dtype, "lt_bernoulli" + draw, dialect)
                      : "lt_kernel::lt_bernoulli<" + std::string(info.c_register) + ">" + draw) +
              ";\n";
          counts_positions = true;
          break;
        }
        // An op computes only on the kinds of element it is defined for: anything else would
        // not compile, or would compute what no op is defined to.
        if (!ir::has_kernel(instr.op, instr.dtype)) {
          throw Error(std::string("codegen: op ") + ir::op_info(instr.op).name +
                      " has no kernel for dtype " + info.name);
        }
        // The op table's row: a functor of the C++ preludes, a function of OpenCL's.
        std::string call = opencl
                               ? "lt_op_" + std::string(ir::op_info(instr.op).name) + "("
                               : "lt_kernel::" + std::string(ir::op_info(instr.op).name) + "Fn{}(";
        for (int a = 0; a < 3 && instr.args[a] >= 0; ++a) {
          call += (a ? ", " : "") + reg(instr.args[a]);
        }
        call += ")";
        if (info.wide_register && !result_is_exact(program, instr)) {
          call = cast(instr.dtype, call, dialect);  // rounded to the dtype
        }
        const bool decodes = std::any_of(decoded.begin(), decoded.end(), [&](const StoredCodes& c) {
          return c.value == static_cast<int32_t>(r);
        });
        if (decodes) {
          body += "#if LT_DECODES_CODES\n    ";
          body += decl + "d" + std::to_string(r) + "[i - block];\n#else\n    ";
          body += decl + call + ";\n#endif\n";
          break;
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
  if (dialect != KernelDialect::cpu) {
    // A grid-stride loop: any grid covers any n.
    out += cuda ? "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
                  "       i += (long long)gridDim.x * blockDim.x) {\n"
                : "  for (long i = get_global_id(0); i < n; i += get_global_size(0)) {\n";
    if (counts_positions) {
      out += cuda ? "    const unsigned int position = static_cast<unsigned int>(start + i);\n"
                  : "    const uint position = (uint)(start + i);\n";
    }
    out += body;
  } else {
    // Blocks with software prefetches of each input array ahead, where the CPU asks for them
    // (the prelude's lt_prefetch_block says why); the elements are visited in the same order.
    if (counts_positions) out += "  unsigned int position = static_cast<unsigned int>(start);\n";
    out += "  for (long block = 0; block < n; block += lt_kernel::kPrefetchBlock) {\n";
    for (int k = 0; k < program.num_inputs(); ++k) {
      out += "  lt_kernel::lt_prefetch_block(in" + std::to_string(k) +
             ", block + lt_kernel::kPrefetchAhead);\n";
    }
    out +=
        "  const long block_end = n - block < lt_kernel::kPrefetchBlock ? n : block + "
        "lt_kernel::kPrefetchBlock;\n";
    for (const StoredCodes& codes : decoded) {
      std::string values = "d";
      values += std::to_string(codes.value);
      out += "#if LT_DECODES_CODES\n  float ";
      out += values + "[lt_kernel::kPrefetchBlock];\n  lt_kernel::lt_decode_dynamic8<";
      out += codes.is_unsigned ? "true" : "false";
      out +=
          ">(" + values + ", in" + std::to_string(codes.input) + " + block, block_end - block);\n";
      out += "#endif\n";
    }
    out += std::string("#pragma GCC ivdep\n  for (long i = block; i < block_end; ++i") +
           (counts_positions ? ", ++position" : "") + ") {\n" + body;
  }
  for (size_t k = 0; k < program.outputs.size(); ++k) {
    const DType dtype = program.instrs[program.outputs[k]].dtype;
    const DTypeInfo& info = dtype_info(dtype);
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
      stored = spelled(store, dialect) + "(" + value + ")";
    } else if (opencl && dtype == DType::boolean) {
      stored = "(uchar)(" + value + ")";
    }
    out += "    out" + std::to_string(k) + "[i] = " + stored + ";\n";
  }
  out += dialect == KernelDialect::cpu ? "  }\n  }\n}\n" : "  }\n}\n";
  return out;
}

}  // namespace lt::backend
