#include "backend/opencl/opencl_source.h"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "backend/kernel_source.h"
#include "backend/opencl/opencl_prelude.h"
#include "ir/dtype_traits.h"
#include "ir/op_semantics.h"
#include "ir/ops.h"

namespace lt::backend::opencl {

namespace {

// The op table's rows as text: each op's kernel expression over a, b, c of type T.
struct OpRow {
  const char* name;
  int arity;
  const char* expression;
};
constexpr OpRow kOpRows[] = {
#define LT_UNARY(Name, name, expr, ref) {#Name, 1, #expr},
#define LT_BINARY(Name, name, expr, ref) {#Name, 2, #expr},
#define LT_TERNARY(Name, name, expr, ref) {#Name, 3, #expr},
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY
};

std::string float_literal(float value) {
  char text[48];
  std::snprintf(text, sizeof text, "%af", static_cast<double>(value));
  return text;
}

std::string levels_table(const char* name, const lt_kernel::LtDynamicLevels& levels) {
  std::string out = "__constant LtDynamicLevels " + std::string(name) + " = {{";
  for (int i = 0; i < 256; ++i) {
    out += (i ? (i % 8 ? ", " : ",\n  ") : "") + float_literal(levels.values[i]);
  }
  return out + "}};\n";
}

std::string buckets_table(const char* name, const lt_kernel::LtDynamicBuckets& buckets) {
  std::string out = "__constant uint " + std::string(name) + "[" +
                    std::to_string(lt_kernel::kLtBuckets) + "] = {";
  char entry[16];
  for (int i = 0; i < lt_kernel::kLtBuckets; ++i) {
    std::snprintf(entry, sizeof entry, "%s0x%xu", i ? (i % 8 ? ", " : ",\n  ") : "",
                  buckets.entry[i]);
    out += entry;
  }
  return out + "};\n";
}

bool is_quantization(ir::OpKind op) {
  return op == ir::OpKind::QuantizeSigned8 || op == ir::OpKind::QuantizeUnsigned8;
}

// Each op of the table as a function per register type it has kernels for, its body the
// table's expression: `T` names the register type, and `T(x)`, C++'s functional cast, is a
// macro for the C cast. The 8-bit quantizations only where a program has one: their bucket
// tables are 6,400 entries of source.
std::string op_functions(bool quantizes) {
  std::string out = "#define T(x) ((T)(x))\n";
  for (size_t k = 0; k < sizeof kOpRows / sizeof kOpRows[0]; ++k) {
    const OpRow& row = kOpRows[k];
    // The rows are the enum's, in order, from Identity on.
    const auto op = static_cast<ir::OpKind>(static_cast<size_t>(ir::OpKind::Identity) + k);
    if (is_quantization(op) && !quantizes) continue;
    std::set<std::string> types;
    for (size_t d = 0; d < kNumDTypes; ++d) {
      const DType dtype = kDTypeInfos[d].dtype;
      if (!ir::has_kernel(op, dtype)) continue;
      types.insert(register_type(dtype, KernelDialect::opencl));
    }
    // Signed integers wrap on overflow, as the CPU's kernels (-fwrapv) do: OpenCL C leaves it
    // undefined (and PoCL takes no -fwrapv), so the ops that can overflow compute in the
    // unsigned type, whose arithmetic wraps, with the same bits.
    const bool wraps = op == ir::OpKind::Add || op == ir::OpKind::Sub || op == ir::OpKind::Mul ||
                       op == ir::OpKind::Neg;
    for (const std::string& type : types) {
      const bool integer = type == "int" || type == "long";
      const std::string computed = wraps && integer ? "u" + type : type;
      const std::string prefix = computed == type ? "" : "_";
      out += "LT_FN " + type + " lt_op_" + row.name + "(" + type + " " + prefix + "a";
      if (row.arity > 1) out += ", " + type + " " + prefix + "b";
      if (row.arity > 2) out += ", " + type + " " + prefix + "c";
      out += ") {\n  typedef " + computed + " T;\n";
      if (!prefix.empty()) {
        out += "  const T a = (T)_a";
        if (row.arity > 1) out += ", b = (T)_b";
        if (row.arity > 2) out += ", c = (T)_c";
        out += ";\n";
      }
      out += "  return (" + type + ")(" + row.expression + ");\n}\n";
    }
  }
  return out + "#undef T\n";
}

}  // namespace

const char* build_options() {
  return "-cl-fp32-correctly-rounded-divide-sqrt";
}

std::string generate_source(const std::vector<const compiler::KernelProgram*>& programs,
                            const std::vector<std::string>& symbols) {
  std::string source =
      "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
      "#pragma OPENCL FP_CONTRACT OFF\n"
      "typedef struct {\n"
      "  float values[256];\n"
      "} LtDynamicLevels;\n";
  source += levels_table("lt_signed_levels", lt_kernel::kLtSignedLevels);
  source += levels_table("lt_unsigned_levels", lt_kernel::kLtUnsignedLevels);
  bool quantizes = false;
  for (const compiler::KernelProgram* program : programs) {
    for (const compiler::Instr& instr : program->instrs) {
      quantizes |= instr.kind == compiler::InstrKind::Op && is_quantization(instr.op);
    }
  }
  if (quantizes) {
    source += "#define LT_BUCKETS " + std::to_string(lt_kernel::kLtBuckets) +
              "\n#define LT_BUCKET_LOW_BITS " + std::to_string(lt_kernel::kLtBucketLowBits) +
              "\n#define LT_FIRST_BUCKET " + std::to_string(lt_kernel::kLtFirstBucket) +
              "\n#define LT_NO_SPLIT " + std::to_string(lt_kernel::kLtNoSplit) + "u\n";
    source += buckets_table("lt_signed_buckets", lt_kernel::kLtDynamicBuckets<false>);
    source += buckets_table("lt_unsigned_buckets", lt_kernel::kLtDynamicBuckets<true>);
  }
  source += kPrelude;
  source += op_functions(quantizes);
  for (size_t i = 0; i < programs.size(); ++i) {
    source += render_kernel(*programs[i], symbols[i], KernelDialect::opencl);
  }
  return source;
}

}  // namespace lt::backend::opencl
