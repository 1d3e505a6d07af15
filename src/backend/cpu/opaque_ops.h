#pragma once
// The CPU routines of the opaque ops (matmul, index_select, index_add, cat): each reads its
// operands where they are, through a view's strides when the operand is a view, and writes
// its contiguous result.
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "compiler/execution_plan.h"
#include "ir/graph.h"

namespace lt::backend::cpu {

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

OpaqueOp make_opaque_op(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                        const compiler::Kernel& kernel);

// Throws lt::Error (an index out of range) before writing anything.
void run_opaque_op(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool);

}  // namespace lt::backend::cpu
