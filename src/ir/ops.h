#pragma once
#include <cstdint>

namespace lt::ir {

// Every IR op. Leaves first, then the elementwise ops of op_table.def, then the rest.
enum class OpKind : uint16_t {
  DeviceData,  // a buffer on the device
  Scalar,      // a number passed by value as a kernel argument (ScalarPolicy::argument)
  Constant,    // a number baked into the graph (ScalarPolicy::constant, special scalars)
#define LT_UNARY(Name, name, expr, ref) Name,
#define LT_BINARY(Name, name, expr, ref) Name,
#define LT_TERNARY(Name, name, expr, ref) Name,
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY
  Cast,  // elementwise conversion to the node's dtype
  Sum,   // reductions over Node::reduce_mask of the operand's dims
  Mean,
  Max,
  Norm,
  kCount,
};

enum class OpCategory : uint8_t { Leaf, Elementwise, Reduction };

struct OpInfo {
  const char* name;  // the kernel functor's name for elementwise ops ("Add" -> lt_kernel::AddFn)
  OpCategory category;
  int arity;
  // Double-precision reference (elementwise ops only), independent of the kernels.
  double (*reference)(double a, double b, double c);
};

const OpInfo& op_info(OpKind op);
inline bool is_elementwise(OpKind op) {
  return op_info(op).category == OpCategory::Elementwise;
}
inline bool is_reduction(OpKind op) {
  return op_info(op).category == OpCategory::Reduction;
}
inline bool is_leaf(OpKind op) {
  return op_info(op).category == OpCategory::Leaf;
}

}  // namespace lt::ir
