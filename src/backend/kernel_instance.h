#pragma once
// A fused kernel bound to a graph's sizes, as every backend launches it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "compiler/execution_plan.h"
#include "compiler/kernel_program.h"
#include "ir/graph.h"

namespace lt::backend {

// How one kernel instance reads one input: straight from the buffer (it is laid out like the
// iteration space) or gathered tile by tile through broadcast strides.
struct InputAccess {
  int slot = 0;
  bool direct = false;
  bool uniform = false;  // one element broadcast everywhere (a rank-0 value)
  // One row repeated over the iteration space's rows (a bias): strides 0 but the last, which is
  // 1. A run of positions within one row reads it in place.
  bool periodic = false;
  // One value per row of the iteration space (a row's statistic): stride 0 along the last dim.
  // A run of positions within one row takes one value.
  bool per_row = false;
  size_t elem_size = 4;
  int64_t offset = 0;                     // in elements: where a view starts in its storage
  int64_t strides[Shape::kMaxRank] = {};  // in elements, over the iteration space
};

// One kernel applied to one set of tensors. The iteration space is collapsed (adjacent dims
// merged where every input allows) and, for reductions, ordered kept dims first, so that an
// output element folds one contiguous run of the linear iteration index, or (columns) left in
// order when only leading dims are reduced.
struct Instance {
  std::vector<InputAccess> inputs;
  std::vector<int> output_slots;
  std::vector<size_t> output_sizes;   // element sizes
  std::vector<uint32_t> scalar_args;  // indices into the step's scalar arguments
  int rank = 0;
  int64_t sizes[Shape::kMaxRank] = {};
  int64_t numel = 0;
  int64_t outer = 1;  // reductions: output elements
  int64_t inner = 0;  // reductions: elements folded into each
  // Reductions over leading dims (columns): the space is ordered reduced dims first, so output
  // element o folds positions o, o + outer, ..., and a row of outputs is contiguous in memory.
  bool columns = false;
  bool all_direct = true;
  bool only_uniform_gathers = true;  // every input direct or one broadcast value
  bool only_row_gathers = true;      // every input direct, one broadcast value, periodic or per row
};

// `kernel` of `plan` over `graph`'s sizes. `allow_columns`: a reduction over leading dims keeps
// its kept dims last (Instance::columns); otherwise every reduction is ordered kept dims first.
Instance make_instance(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                       const compiler::Kernel& kernel, compiler::ReduceKind reduce,
                       bool allow_columns);

}  // namespace lt::backend
