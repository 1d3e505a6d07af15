#pragma once
// The CPU routines of the opaque ops (matmul, index_select, index_add, cat): each reads its
// operands where they are, through a view's strides when the operand is a view, and writes
// its contiguous result.
#include <cstdint>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "backend/opaque_op.h"
#include "compiler/execution_plan.h"
#include "ir/graph.h"

namespace lt::backend::cpu {

using backend::OpaqueOp;
using backend::StridedOperand;

// Throws lt::Error (an index out of range) before writing anything.
void run_opaque_op(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool);

}  // namespace lt::backend::cpu
