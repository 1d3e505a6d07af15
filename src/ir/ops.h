#pragma once
#include <cstdint>

#include "lazytensor/dtype.h"

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
  Iota,  // elementwise, no operands: each element's linear index in the node's shape (f64)
  // Elementwise: operand 0 (a floating value) rounded to the node's dtype (bf16) up or down at
  // random, with probabilities that make the result unbiased; operand 1 is the draw's key (a
  // Scalar), and the element's linear index is the counter, as for Iota.
  StochasticRound,
  // Elementwise: 1 with probability operand 1 (an f64 Scalar), else 0, in the node's floating
  // dtype (dropout's masks); operand 0 is the draw's key (a Scalar) and the element's linear
  // index the counter, as for StochasticRound.
  Bernoulli,
  Sum,  // reductions over Node::reduce_mask of the operand's dims
  Mean,
  Max,
  Norm,
  ArgMax,  // i64: the position of the first maximum (NaN counts as the maximum) in the run
  // A strided window on its operand's contiguous storage (Node::view_offset, view_strides):
  // reshape, permute, expand, slice, squeeze. Kernels read it in place; never written out
  // unless it is a graph output.
  View,
  // Opaque ops: run by the backend's own routine over operands in memory (views read in
  // place), never fused into a kernel program.
  MatMul,       // [..., M, K] x [..., K, N] -> [batch..., M, N], batch dims broadcast
  IndexSelect,  // (table, ids: 1-D integer), attrs {dim}: rows of `table` along dim
  IndexAdd,     // (source, ids: 1-D integer), attrs {dim, size}: zeros with source rows added
  Cat,          // N operands, attrs {dim}
  // (ids: integer), attrs {size, ignore}: the ids, each checked to be in [0, size) or equal
  // to `ignore` (cross_entropy's targets, which kernels compare rather than index with).
  CheckIndex,
  // Row by row along the last dim, a row's elements in order (other dims are moved there first):
  // ArgSort: (x), attrs {descending}: the i64 positions that sort each row, stably, NaN above
  // every number (as torch.sort); CumSum: (x), attrs {reverse}: running sums (from the row's end
  // when reverse), accumulated in f64 for floating values and in i64 (wrapping) for integers.
  ArgSort,
  CumSum,
  // Collectives across the ranks of lt::distributed (MPI), on the one operand.
  AllReduce,      // attrs {ReduceOp}: same shape
  AllGather,      // attrs {0}: the ranks' operands concatenated along dim 0
  ReduceScatter,  // attrs {ReduceOp}: the reduction's part of this rank along dim 0
  Broadcast,      // attrs {root}: the root rank's operand
  kCount,
};

enum class OpCategory : uint8_t { Leaf, Elementwise, Reduction, View, Opaque };

struct OpInfo {
  const char* name;  // the kernel functor's name for elementwise ops ("Add" -> lt_kernel::AddFn)
  OpCategory category;
  int arity;  // -1: any number of operands
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
inline bool is_view(OpKind op) {
  return op == OpKind::View;
}
inline bool is_opaque(OpKind op) {
  return op_info(op).category == OpCategory::Opaque;
}
// The kinds of register an elementwise op computes on, a bit each: floating (f32, f64, bf16,
// f16), integer (i32, i64), bool, and the bytes of u8, which only copy.
enum ElementKind : uint8_t {
  kFloatingElements = 1,
  kIntegerElements = 2,
  kBoolElements = 4,
  kByteElements = 8,
};
constexpr uint8_t element_kind(DType dtype) {
  switch (dtype) {
    case DType::i32:
    case DType::i64:
      return kIntegerElements;
    case DType::boolean:
      return kBoolElements;
    case DType::u8:
      return kByteElements;
    default:
      return kFloatingElements;
  }
}
// Which kinds `op` has kernels for. An op without an integer kernel (exp, true division)
// computes integer and bool operands in f32, as PyTorch promotes them (trace::elementwise).
constexpr uint8_t element_kinds(OpKind op) {
  constexpr uint8_t numbers = kFloatingElements | kIntegerElements;
  switch (op) {
    case OpKind::Identity:
    case OpKind::Cast:
      return numbers | kBoolElements | kByteElements;
    case OpKind::Neg:
    case OpKind::Abs:
    case OpKind::Relu:
    case OpKind::Sign:
    case OpKind::Sub:
    case OpKind::Pow:
    case OpKind::Clamp:
    case OpKind::FloorDivide:
    case OpKind::Remainder:
      return numbers;
    // On bool values maximum is or and minimum and (trace::elementwise computes add and mul
    // of bool values as or and and, as PyTorch defines them).
    case OpKind::Add:
    case OpKind::Mul:
      return numbers;
    case OpKind::Maximum:
    case OpKind::Minimum:
    case OpKind::Where:
      return numbers | kBoolElements;
    // u8 values compare too (8-bit optimizer codes).
    case OpKind::Eq:
    case OpKind::Ne:
    case OpKind::Lt:
    case OpKind::Le:
    case OpKind::Gt:
    case OpKind::Ge:
      return numbers | kBoolElements | kByteElements;
    case OpKind::BitwiseAnd:
    case OpKind::BitwiseOr:
    case OpKind::BitwiseXor:
      return kIntegerElements | kBoolElements;
    default:
      return kFloatingElements;
  }
}
inline bool has_kernel(OpKind op, DType dtype) {
  return (element_kinds(op) & element_kind(dtype)) != 0;
}

// Whether attribute k of an `op` node is a size (a view's offset and strides, index_add's
// result size, check_index's bound): like a dim, a value that a graph's signature keeps only
// when it is 0 or 1, so that one compiled graph serves every sequence length.
inline bool is_size_attr(OpKind op, int k) {
  return op == OpKind::View || (op == OpKind::IndexAdd && k == 1) ||
         (op == OpKind::CheckIndex && k == 0);
}

}  // namespace lt::ir
