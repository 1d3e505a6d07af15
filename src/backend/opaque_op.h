#pragma once
// An opaque op (matmul, gather, sort, ...) as a backend's routine receives it: its operands
// where they are in the step's buffers, through a view's strides, and its contiguous result.
#include <cstdint>
#include <optional>
#include <vector>

#include "compiler/execution_plan.h"
#include "ir/graph.h"

namespace lt::backend {

// An operand as the routine reads it: element (i0, i1, ...) of `shape` is at
// offset + i0 * strides[0] + i1 * strides[1] + ... elements of buffer `slot`.
struct StridedOperand {
  int slot = 0;
  DType dtype = DType::f32;
  Shape shape;
  int64_t offset = 0;
  int64_t strides[Shape::kMaxRank] = {};
};

struct OpaqueOp {
  ir::OpKind op = ir::OpKind::MatMul;
  std::vector<StridedOperand> operands;
  int output_slot = 0;
  Shape output_shape;
  DType output_dtype = DType::f32;
  std::vector<int64_t> attrs;
};

// The lt::IndexError of an index op (`op`: "index_select (embedding)", "index_add",
// "cross_entropy") whose id at `position` is outside [0, size) of `dim`; `ignore`, cross_entropy's
// ignore_index, is named as also valid.
[[noreturn]] void throw_index_out_of_range(const char* op, int dim, int64_t size, int64_t id,
                                           int64_t position, std::optional<int64_t> ignore);

// Whether the operand's elements are laid out row-major from its offset (dims of size 1 aside).
bool is_contiguous(const StridedOperand& x);

// The indexed dim of an index op splits its table into outer x rows x inner elements.
struct IndexGeometry {
  int dim = 0;
  int64_t outer = 1, rows = 0, inner = 1;
};
IndexGeometry geometry(const Shape& table, int dim);

// Rows of the last dim (sort's and cumsum's): `rows` of `n` elements each.
struct Rows {
  int64_t rows = 0, n = 0;
};
Rows rows_of(const Shape& shape);

// Row-major strides of `shape`, in elements.
void contiguous_strides(const Shape& shape, int64_t* strides);

OpaqueOp make_opaque_op(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                        const compiler::Kernel& kernel);

}  // namespace lt::backend
