#include "backend/kernel_instance.h"

#include <algorithm>
#include <array>
#include <vector>

#include "compiler/fusion.h"

namespace lt::backend {

namespace {

using compiler::ReduceKind;

// Kept columns a reduction over leading dims needs to take the column path.
constexpr int64_t kMinColumns = 64;
// Row-major strides, 0 for dims of size 1 (so that they merge with any neighbour).
void contiguous_strides_skipping_ones(const Shape& shape, int64_t* strides) {
  int64_t stride = 1;
  for (int d = shape.rank() - 1; d >= 0; --d) {
    strides[d] = shape[d] == 1 ? 0 : stride;
    stride *= shape[d];
  }
}

// Strides of input node `index` broadcast over `space` (right-aligned, as in PyTorch): a
// view's own strides over its storage, else the contiguous ones.
void broadcast_strides(const ir::Graph& graph, uint32_t index, const Shape& space,
                       int64_t* strides) {
  const ir::Node& node = graph.node(index);
  const Shape& input = node.shape;
  int64_t own[Shape::kMaxRank];
  if (ir::is_view(node.op)) {
    for (int d = 0; d < input.rank(); ++d) own[d] = input[d] == 1 ? 0 : node.view_stride(d);
  } else {
    contiguous_strides_skipping_ones(input, own);
  }
  const int offset = space.rank() - input.rank();
  for (int d = 0; d < space.rank(); ++d) {
    const int e = d - offset;
    strides[d] = (e < 0 || input[e] == 1) ? 0 : own[e];
  }
}

// Whether a reduction over `space` folds only leading dims (ignoring dims of size 1) and keeps
// at least kMinColumns columns: a column reduction (a bias's gradient summed over the batch),
// whose kept elements are neighbours in memory. Fewer columns stay on the general path: the
// column path makes a kernel call per row (per 1024 columns of it), too short to pay for itself
// on so few columns.
bool reduces_leading_dims(const Shape& space, uint32_t reduce_mask) {
  bool kept_seen = false, reduced = false;
  int64_t kept = 1;
  for (int d = 0; d < space.rank(); ++d) {
    if (space[d] == 1) continue;
    if (reduce_mask >> d & 1) {
      if (kept_seen) return false;
      reduced = true;
    } else {
      kept_seen = true;
      kept *= space[d];
    }
  }
  return reduced && kept >= kMinColumns;
}

// Orders dims (for reductions: kept dims first, or reduced dims first when `reduced_first`),
// drops size-1 dims and merges neighbours of one group that every input walks contiguously.
// Returns the number of leading dims of the first group.
int arrange_space(const Shape& space, uint32_t reduce_mask, bool reduced_first, Instance& inst,
                  std::vector<std::array<int64_t, Shape::kMaxRank>>& strides) {
  const auto in_first_group = [&](int d) { return (reduce_mask >> d & 1) == reduced_first; };
  std::vector<int> order;
  for (int d = 0; d < space.rank(); ++d) {
    if (in_first_group(d)) order.push_back(d);
  }
  const int first_all = static_cast<int>(order.size());
  for (int d = 0; d < space.rank(); ++d) {
    if (!in_first_group(d)) order.push_back(d);
  }
  int rank = 0, kept = 0;
  int64_t sizes[Shape::kMaxRank];
  std::vector<std::array<int64_t, Shape::kMaxRank>> out(strides.size());
  for (int k = 0; k < static_cast<int>(order.size()); ++k) {
    const int d = order[k];
    const bool is_kept = k < first_all;  // in the first group
    if (space[d] == 1) continue;
    const bool same_group = rank > 0 && (is_kept == (rank <= kept));
    bool mergeable = same_group;
    for (size_t i = 0; mergeable && i < strides.size(); ++i) {
      mergeable = out[i][rank - 1] == strides[i][d] * space[d];
    }
    if (mergeable) {
      sizes[rank - 1] *= space[d];
      for (size_t i = 0; i < strides.size(); ++i) out[i][rank - 1] = strides[i][d];
    } else {
      sizes[rank] = space[d];
      for (size_t i = 0; i < strides.size(); ++i) out[i][rank] = strides[i][d];
      ++rank;
      if (is_kept) kept = rank;
    }
  }
  inst.rank = rank;
  std::copy(sizes, sizes + rank, inst.sizes);
  strides = std::move(out);
  return kept;
}

}  // namespace

Instance make_instance(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                       const compiler::Kernel& kernel, ReduceKind reduce, bool allow_columns) {
  Instance inst;
  const Shape& space = compiler::iteration_shape(graph, kernel);
  std::vector<std::array<int64_t, Shape::kMaxRank>> strides(kernel.input_nodes.size());
  for (size_t i = 0; i < kernel.input_nodes.size(); ++i) {
    broadcast_strides(graph, kernel.input_nodes[i], space, strides[i].data());
  }
  inst.numel = space.numel();
  inst.columns = allow_columns && reduce != ReduceKind::None && reduce != ReduceKind::ArgMax &&
                 inst.numel > 0 && reduces_leading_dims(space, kernel.reduce_mask);
  const int first_group = arrange_space(space, kernel.reduce_mask, inst.columns, inst, strides);
  if (reduce != ReduceKind::None) {
    // Kept dims first: output o folds [o * inner, (o + 1) * inner). Reduced dims first
    // (columns): output o folds o, o + outer, o + 2 * outer, ...
    const int kept_begin = inst.columns ? first_group : 0;
    const int kept_end = inst.columns ? inst.rank : first_group;
    inst.outer = 1;
    inst.inner = 1;
    for (int d = 0; d < inst.rank; ++d) {
      (d >= kept_begin && d < kept_end ? inst.outer : inst.inner) *= inst.sizes[d];
    }
    if (inst.numel == 0) {
      // Only the outputs' count matters: each is the empty fold.
      inst.outer = graph.node(kernel.output_nodes[0]).shape.numel();
      inst.inner = 0;
    }
  }
  int64_t contiguous[Shape::kMaxRank];
  for (int64_t d = inst.rank - 1, stride = 1; d >= 0; --d) {
    contiguous[d] = stride;
    stride *= inst.sizes[d];
  }
  for (size_t i = 0; i < kernel.input_nodes.size(); ++i) {
    InputAccess access;
    const ir::Node& input = graph.node(kernel.input_nodes[i]);
    access.slot = plan.slot_of[compiler::storage_node(graph, kernel.input_nodes[i])];
    access.offset = ir::is_view(input.op) ? input.view_offset() : 0;
    access.elem_size = dtype_size(graph.node(kernel.input_nodes[i]).dtype);
    std::copy(strides[i].begin(), strides[i].begin() + inst.rank, access.strides);
    access.direct = std::equal(access.strides, access.strides + inst.rank, contiguous);
    access.uniform =
        std::all_of(access.strides, access.strides + inst.rank, [](int64_t s) { return s == 0; });
    access.periodic = !access.direct && !access.uniform && inst.rank >= 2 &&
                      access.strides[inst.rank - 1] == 1 &&
                      std::all_of(access.strides, access.strides + inst.rank - 1,
                                  [](int64_t s) { return s == 0; });
    inst.all_direct = inst.all_direct && access.direct;
    inst.only_uniform_gathers = inst.only_uniform_gathers && (access.direct || access.uniform);
    access.per_row =
        !access.direct && !access.uniform && inst.rank >= 2 && access.strides[inst.rank - 1] == 0;
    inst.only_row_gathers = inst.only_row_gathers &&
                            (access.direct || access.uniform || access.periodic || access.per_row);
    inst.inputs.push_back(access);
  }
  for (uint32_t node : kernel.output_nodes) {
    inst.output_slots.push_back(plan.slot_of[node]);
    inst.output_sizes.push_back(dtype_size(graph.node(node).dtype));
  }
  for (uint32_t node : kernel.scalar_nodes) {
    inst.scalar_args.push_back(plan.scalar_position[node]);
  }
  return inst;
}

}  // namespace lt::backend
