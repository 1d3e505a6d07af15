#include "compiler/execution_plan.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace lt::compiler {

namespace {

// How many leading dims a reduction kernel keeps when it reduces a suffix of its dims (the
// rows it computes one result for); 0 if it is not such a kernel, or keeps a single row and
// `one_row` is false (a group of one row gains nothing; a tensor of one row in a multi-tensor
// group does not keep the others out). Sizes enter only as dims of 0 and 1, which the graph's
// signature keeps.
int kernel_row_dims(const ir::Graph& graph, const Kernel& kernel, bool one_row) {
  if (kernel.opaque >= 0 || kernel.program.reduce == ReduceKind::None) return 0;
  const Shape& space = iteration_shape(graph, kernel);
  int first = space.rank();
  while (first > 0 && (kernel.reduce_mask >> (first - 1) & 1)) --first;
  if (first == 0 || first == space.rank()) return 0;
  int64_t count = 1;
  for (int d = 0; d < first; ++d) {
    if (kernel.reduce_mask >> d & 1) return 0;  // a reduced dim among the kept ones
    count *= space[d];
  }
  return count < (one_row ? 1 : 2) ? 0 : first;
}

// The leading dims that each kernel of a reduction launch keeps (one kernel, or one per tensor
// of a multi-tensor launch: an 8-bit optimizer's block maxima, of matrices and of stacks of
// them); empty if any kernel reduces no suffix.
std::vector<int> reduced_row_dims(const ir::Graph& graph, const ExecutionPlan& plan,
                                  const PlannedLaunch& launch) {
  std::vector<int> dims;
  for (uint32_t k : launch.kernels) {
    const int own = kernel_row_dims(graph, plan.kernels[k], launch.kernels.size() > 1);
    if (own == 0) return {};
    dims.push_back(own);
  }
  return dims;
}

// The rows of a row group: the first `dims[i]` dims of `nodes[i]`'s shape for the group's i-th
// instance (the kernels at position i of its first launch: one tensor of a multi-tensor launch).
struct Rows {
  std::vector<uint32_t> nodes;
  std::vector<int> dims;
};

// Whether `node`'s shape starts with the rows of `row_node` (an assumption the plan records).
bool starts_with_rows(const ir::Graph& graph, ExecutionPlan& plan, uint32_t node, uint32_t row_node,
                      int dims) {
  return graph.node(node).shape.rank() >= dims &&
         plan.assumptions.same_leading_dims(graph, node, row_node, dims);
}

// Reorders launches so that row groups are consecutive, and marks them. A group starts with a
// reduction over trailing dims; a later launch joins it if it iterates the same leading dims,
// reads the group's results only through same-rank values with those leading dims (row for
// row), and reads a group result or a value the group already reads row for row (cross-entropy's
// pick of the target's logit reads the logits the group's max and sum read: inside the group
// it reads them from cache). A launch that reads neither may run before the whole group. The
// latest elementwise launch before the reduction whose results the reduction reads row for row
// leads the group, if nothing between them reads what it writes (an 8-bit optimizer's moments,
// computed once for their block maxima and their codes).
//
// Multi-tensor launches group tensor by tensor: the group's instances are the first
// reduction's kernels (one per tensor), and every kernel of the group iterates the rows of the
// instance whose results it reads (or whose rows it shares), reading no other's.
void group_rows(const ir::Graph& graph, ExecutionPlan& plan) {
  std::vector<PlannedLaunch> ordered;
  size_t free_from = 0;  // ordered[free_from..] belong to no group
  std::vector<PlannedLaunch> group;
  Rows rows;
  std::map<uint32_t, uint32_t> written;  // node the open group writes -> its instance
  // Storage the group's instances read row for row -> the instance (kAmbiguous: several).
  constexpr uint32_t kAmbiguous = UINT32_MAX;
  std::map<uint32_t, uint32_t> read_rows;
  // Whether `kernel` (of instance i) reads `node` row for row: a value (or a reshape of all of
  // a storage, as the MLM head's [1024, 30522] logits of a [8, 128, 30522] result) whose
  // leading dims are the group's rows.
  auto row_for_row = [&](const Kernel& kernel, uint32_t node, uint32_t i, bool reshape_allowed) {
    const ir::Node& value = graph.node(node);
    const bool in_place = reshape_allowed ? plan.assumptions.reads_storage_in_order(graph, node)
                                          : !ir::is_view(value.op);
    return in_place && value.shape.rank() == iteration_shape(graph, kernel).rank() &&
           starts_with_rows(graph, plan, node, rows.nodes[i], rows.dims[i]);
  };
  auto reads_group = [&](const PlannedLaunch& launch) {
    for (uint32_t k : launch.kernels) {
      for (uint32_t node : plan.kernels[k].input_nodes) {
        if (written.count(storage_node(graph, node))) return true;
      }
    }
    return false;
  };
  // The instance a kernel would join: the one whose results it reads, else the one whose
  // row-for-row reads it shares; none where that is no single one.
  auto instance_of = [&](const Kernel& kernel) -> std::optional<uint32_t> {
    std::optional<uint32_t> found;
    for (const bool results : {true, false}) {
      for (uint32_t node : kernel.input_nodes) {
        const uint32_t storage = storage_node(graph, node);
        const auto& seen = results ? written : read_rows;
        const auto it = seen.find(storage);
        if (it == seen.end()) continue;
        if (it->second == kAmbiguous || (found && *found != it->second)) return std::nullopt;
        found = it->second;
      }
      if (found) return found;
    }
    return std::nullopt;
  };
  // The instance of each of the launch's kernels, if the launch may join the group.
  auto may_join = [&](const PlannedLaunch& launch) -> std::optional<std::vector<uint32_t>> {
    std::vector<uint32_t> instances;
    for (uint32_t k : launch.kernels) {
      const Kernel& kernel = plan.kernels[k];
      const std::optional<uint32_t> i = instance_of(kernel);
      if (kernel.opaque >= 0 || !i ||
          !starts_with_rows(graph, plan, kernel.shape_node, rows.nodes[*i], rows.dims[*i])) {
        return std::nullopt;
      }
      if (kernel.program.reduce != ReduceKind::None &&
          kernel_row_dims(graph, kernel, true) != rows.dims[*i]) {
        return std::nullopt;
      }
      // A kernel that shares no rows with the group gains nothing inside it.
      bool shares_rows = false;
      for (uint32_t node : kernel.input_nodes) {
        const uint32_t storage = storage_node(graph, node);
        if (written.count(storage)) {
          if (!row_for_row(kernel, node, *i, false)) return std::nullopt;
          shares_rows = true;
        } else if (const auto it = read_rows.find(storage);
                   it != read_rows.end() && it->second == *i) {
          shares_rows = shares_rows || row_for_row(kernel, node, *i, true);
        }
      }
      if (!shares_rows) return std::nullopt;
      instances.push_back(*i);
    }
    return instances;
  };
  // A launch that does not join took nothing from the sizes' answers it got on the way.
  auto joins = [&](const PlannedLaunch& launch) {
    const size_t mark = plan.assumptions.size();
    std::optional<std::vector<uint32_t>> instances = may_join(launch);
    if (!instances) plan.assumptions.forget_since(mark);
    return instances;
  };
  auto add_to_group = [&](PlannedLaunch launch, std::vector<uint32_t> instances) {
    for (size_t j = 0; j < launch.kernels.size(); ++j) {
      const Kernel& kernel = plan.kernels[launch.kernels[j]];
      const uint32_t i = instances[j];
      for (uint32_t node : kernel.output_nodes) written[node] = i;
      for (uint32_t node : kernel.input_nodes) {
        if (!row_for_row(kernel, node, i, true)) continue;
        const auto [it, fresh] = read_rows.emplace(storage_node(graph, node), i);
        if (!fresh && it->second != i) it->second = kAmbiguous;
      }
    }
    launch.row_instance = std::move(instances);
    group.push_back(std::move(launch));
  };
  auto flush = [&] {
    if (group.size() > 1) {
      group.front().row_group = static_cast<uint32_t>(group.size());
      group.front().row_dims = rows.dims;
      group.front().row_nodes = rows.nodes;
    } else {
      for (PlannedLaunch& launch : group) launch.row_instance.clear();
    }
    for (PlannedLaunch& launch : group) ordered.push_back(std::move(launch));
    if (group.size() > 1) free_from = ordered.size();
    group.clear();
    written.clear();
    read_rows.clear();
    rows = Rows{};
  };
  // Starts the group of reduction `launch` with the latest launch of ordered[free_from..] that
  // writes what the reduction reads, if every kernel of it is elementwise and writes what one
  // of the reduction's kernels reads (that kernel's tensor is its own), no launch between them
  // reads what it writes, and the reduction then joins the group with each kernel in its own
  // tensor's place. Whether it did.
  auto lead_in = [&](const PlannedLaunch& launch) {
    std::map<uint32_t, uint32_t> reader;  // storage the reduction reads -> its instance
    for (uint32_t i = 0; i < launch.kernels.size(); ++i) {
      for (uint32_t node : plan.kernels[launch.kernels[i]].input_nodes) {
        const auto [it, fresh] = reader.emplace(storage_node(graph, node), i);
        if (!fresh && it->second != i) it->second = kAmbiguous;
      }
    }
    for (size_t p = ordered.size(); p-- > free_from;) {
      const PlannedLaunch& candidate = ordered[p];
      std::vector<uint32_t> instances;
      size_t unread = 0;  // kernels that write nothing the reduction reads
      for (uint32_t k : candidate.kernels) {
        const Kernel& kernel = plan.kernels[k];
        std::optional<uint32_t> found;
        for (uint32_t node : kernel.output_nodes) {
          const auto it = reader.find(node);
          if (it == reader.end()) continue;
          if (it->second == kAmbiguous || (found && *found != it->second)) return false;
          found = it->second;
        }
        if (!found) {
          ++unread;
          continue;
        }
        if (kernel.opaque >= 0 || kernel.program.reduce != ReduceKind::None) return false;
        instances.push_back(*found);
      }
      if (instances.empty()) continue;  // writes nothing the reduction reads
      if (unread > 0) return false;
      // Nothing between the candidate and the reduction reads what the candidate writes.
      std::set<uint32_t> outputs;
      for (uint32_t k : candidate.kernels) {
        for (uint32_t node : plan.kernels[k].output_nodes) outputs.insert(node);
      }
      for (size_t q = p + 1; q < ordered.size(); ++q) {
        for (uint32_t k : ordered[q].kernels) {
          for (uint32_t node : plan.kernels[k].input_nodes) {
            if (outputs.count(storage_node(graph, node))) return false;
          }
        }
      }
      const size_t mark = plan.assumptions.size();
      for (size_t j = 0; j < candidate.kernels.size(); ++j) {
        const Kernel& kernel = plan.kernels[candidate.kernels[j]];
        if (!starts_with_rows(graph, plan, kernel.shape_node, rows.nodes[instances[j]],
                              rows.dims[instances[j]])) {
          plan.assumptions.forget_since(mark);
          return false;
        }
      }
      PlannedLaunch lead = std::move(ordered[p]);
      ordered.erase(ordered.begin() + static_cast<std::ptrdiff_t>(p));
      add_to_group(std::move(lead), std::move(instances));
      std::optional<std::vector<uint32_t>> own = may_join(launch);
      bool identity = own.has_value();
      for (uint32_t i = 0; identity && i < own->size(); ++i) identity = (*own)[i] == i;
      if (identity) return true;
      // Undone: the candidate goes back where it was.
      plan.assumptions.forget_since(mark);
      ordered.insert(ordered.begin() + static_cast<std::ptrdiff_t>(p), std::move(group.back()));
      ordered[p].row_instance.clear();
      group.clear();
      written.clear();
      read_rows.clear();
      return false;
    }
    return false;
  };
  for (PlannedLaunch& launch : plan.launches) {
    if (!group.empty()) {
      if (std::optional<std::vector<uint32_t>> instances = joins(launch)) {
        add_to_group(std::move(launch), std::move(*instances));
        continue;
      }
      if (!reads_group(launch)) {
        ordered.push_back(std::move(launch));
        continue;
      }
      flush();
    }
    rows = Rows{{}, reduced_row_dims(graph, plan, launch)};
    for (uint32_t k : launch.kernels) rows.nodes.push_back(plan.kernels[k].shape_node);
    if (rows.dims.empty()) {
      ordered.push_back(std::move(launch));
      continue;
    }
    lead_in(launch);
    std::vector<uint32_t> identity(launch.kernels.size());
    std::iota(identity.begin(), identity.end(), 0u);
    add_to_group(std::move(launch), std::move(identity));
  }
  flush();
  plan.launches = std::move(ordered);
}

// Moves each launch of reductions over launch-written values to just after the last launch it
// reads from, past launches that it does not depend on. In level order a bias gradient's column
// sum ran after the products that read the same output gradient (the input's gradient feeds
// the rest of the backward pass, so the products came first); moved up, it reads the gradient
// just written and ends its inputs' lifetimes sooner (a bf16 BERT step's peak memory: base
// 2,317 -> 2,294 MiB, mini 587 -> 560; the step's time did not change beyond noise). A row
// group moves as one and takes none in. Reductions have no effect but their outputs, so running
// one earlier changes nothing else; lifetimes and buffers are decided afterwards, on this order.
void hoist_reductions(const ir::Graph& graph, ExecutionPlan& plan) {
  struct Block {
    size_t first = 0, count = 0;  // launches [first, first + count) of the order planned so far
  };
  std::vector<Block> ordered;
  std::map<uint32_t, size_t> writer;  // storage node -> the block in `ordered` that writes it
  auto is_reduction = [&](const PlannedLaunch& launch) {
    if (launch.row_group > 1) return false;
    for (uint32_t k : launch.kernels) {
      const Kernel& kernel = plan.kernels[k];
      if (kernel.opaque >= 0 || kernel.program.reduce == ReduceKind::None) return false;
    }
    return true;
  };
  for (size_t l = 0; l < plan.launches.size();) {
    const PlannedLaunch& launch = plan.launches[l];
    const Block block{l, std::max<size_t>(1, launch.row_group)};
    size_t at = ordered.size();
    if (is_reduction(launch)) {
      std::optional<size_t> last_read;
      for (uint32_t k : launch.kernels) {
        for (uint32_t node : plan.kernels[k].input_nodes) {
          const auto it = writer.find(storage_node(graph, node));
          if (it != writer.end()) last_read = std::max(last_read.value_or(0), it->second);
        }
      }
      if (last_read) at = *last_read + 1;
    }
    if (at < ordered.size()) {
      for (auto& entry : writer) {
        if (entry.second >= at) ++entry.second;
      }
    }
    ordered.insert(ordered.begin() + static_cast<std::ptrdiff_t>(at), block);
    for (size_t m = block.first; m < block.first + block.count; ++m) {
      for (uint32_t k : plan.launches[m].kernels) {
        for (uint32_t node : plan.kernels[k].output_nodes) writer[storage_node(graph, node)] = at;
      }
    }
    l += block.count;
  }
  std::vector<PlannedLaunch> launches;
  launches.reserve(plan.launches.size());
  for (const Block& block : ordered) {
    for (size_t m = block.first; m < block.first + block.count; ++m) {
      launches.push_back(std::move(plan.launches[m]));
    }
  }
  plan.launches = std::move(launches);
}

}  // namespace

// Packs the temporaries into one arena. A temporary and the ones that take over its buffer are
// one block, live from the first one's writing launch to the last one's last reading launch.
// Blocks are placed largest first, each at the lowest offset where it overlaps no placed block
// that is live at the same time: the usual greedy packing for buffers with known lifetimes,
// within a few percent of the peak of live bytes on training graphs.
ArenaLayout layout_arena(const ExecutionPlan& plan, const ir::Graph& graph,
                         const std::vector<char>& in_scratch) {
  const size_t num_temps = plan.temp_nodes.size();
  std::vector<uint32_t> root(num_temps);
  for (uint32_t t = 0; t < num_temps; ++t) {
    // A temporary takes over one written earlier, so its root is already known.
    root[t] = plan.temp_reuses[t] >= 0 ? root[plan.temp_reuses[t]] : t;
  }
  struct Block {
    size_t bytes = 0;
    uint32_t begin = UINT32_MAX, end = 0;
    size_t offset = 0;
  };
  std::vector<Block> blocks(num_temps);
  for (uint32_t t = 0; t < num_temps; ++t) {
    const ir::Node& value = graph.node(plan.temp_nodes[t]);
    const size_t bytes = static_cast<size_t>(value.shape.numel()) * dtype_size(value.dtype);
    Block& b = blocks[root[t]];
    b.bytes = std::max(b.bytes, (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment);
    b.begin = std::min(b.begin, plan.temp_first_launch[t]);
    b.end = std::max(b.end, plan.temp_last_launch[t]);
  }
  std::vector<uint32_t> order;
  for (uint32_t t = 0; t < num_temps; ++t) {
    if (root[t] == t && !(t < in_scratch.size() && in_scratch[t])) order.push_back(t);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return blocks[a].bytes != blocks[b].bytes ? blocks[a].bytes > blocks[b].bytes
                                              : blocks[a].begin < blocks[b].begin;
  });
  ArenaLayout layout;
  std::vector<uint32_t> placed;
  std::vector<std::pair<size_t, size_t>> taken;  // [offset, end) of live placed blocks
  for (uint32_t r : order) {
    Block& block = blocks[r];
    taken.clear();
    for (uint32_t other : placed) {
      const Block& o = blocks[other];
      if (o.begin <= block.end && block.begin <= o.end) {
        taken.emplace_back(o.offset, o.offset + o.bytes);
      }
    }
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [start, stop] : taken) {
      if (start >= offset + block.bytes) break;  // the gap before this one fits
      offset = std::max(offset, stop);
    }
    block.offset = offset;
    layout.arena_bytes = std::max(layout.arena_bytes, offset + block.bytes);
    placed.push_back(r);
  }
  layout.temp_offset.resize(num_temps);
  for (uint32_t t = 0; t < num_temps; ++t) layout.temp_offset[t] = blocks[root[t]].offset;
  // Empty temporaries (no elements) still get a real address: routines such as memcpy must
  // not be handed null, even for zero bytes.
  if (num_temps > 0) layout.arena_bytes = std::max(layout.arena_bytes, kArenaAlignment);
  return layout;
}

int64_t row_group_rows(const ExecutionPlan& plan, const ir::Graph& graph, size_t launch,
                       size_t instance) {
  const PlannedLaunch& first = plan.launches[launch];
  const Shape& space = graph.node(first.row_nodes[instance]).shape;
  int64_t rows = 1;
  for (int d = 0; d < first.row_dims[instance]; ++d) rows *= space[d];
  return rows;
}

namespace {

// One plan's work, phase by phase: slots and scalar positions, launches (and row groups),
// where each slot is first written and last read, temporaries written over dying ones, the
// arena, and the outputs that may take over an input's buffer.
class Planner {
 public:
  Planner(const ir::Graph& graph, const FusionOptions& options)
      : graph_(graph), options_(options) {}

  ExecutionPlan run() {
    plan_.kernels = partition(graph_, options_);
    number_slots_and_scalars();
    group_launches();
    if (options_.row_groups) group_rows(graph_, plan_);
    hoist_reductions(graph_, plan_);
    follow_slots_in_execution_order();
    span_row_groups();
    index_readers();
    mark_row_local_temporaries();
    reuse_temporaries();
    find_donation_candidates();
    return std::move(plan_);
  }

 private:
  void number_slots_and_scalars() {
    const size_t n = graph_.nodes.size();
    plan_.num_inputs = static_cast<int>(graph_.inputs.size());
    plan_.num_outputs = static_cast<int>(graph_.outputs.size());
    first_temp_ = plan_.num_inputs + plan_.num_outputs;
    plan_.slot_of.assign(n, -1);
    for (size_t i = 0; i < graph_.inputs.size(); ++i) {
      plan_.slot_of[graph_.inputs[i]] = static_cast<int32_t>(i);
    }
    for (size_t o = 0; o < graph_.outputs.size(); ++o) {
      plan_.slot_of[graph_.outputs[o]] = plan_.num_inputs + static_cast<int32_t>(o);
    }
    plan_.scalar_position.assign(n, 0);
    for (size_t s = 0; s < graph_.scalars.size(); ++s) {
      plan_.scalar_position[graph_.scalars[s]] = static_cast<uint32_t>(s);
    }
  }

  // Kernels arrive sorted by level; a launch's place is that of its first kernel.
  void group_launches() {
    std::map<std::pair<int, std::string>, size_t> launch_of;
    for (size_t k = 0; k < plan_.kernels.size(); ++k) {
      const Kernel& kernel = plan_.kernels[k];
      // Opaque ops run one by one: each has its own shapes and routine.
      const std::string key =
          kernel.opaque >= 0 ? "opaque " + std::to_string(k) : kernel.program.key();
      auto [it, fresh] =
          launch_of.emplace(std::make_pair(kernel.level, key), plan_.launches.size());
      if (fresh) plan_.launches.emplace_back();
      plan_.launches[it->second].kernels.push_back(static_cast<uint32_t>(k));
    }
  }

  // The slot of `node`; a temporary gets one where it is first met (written) at `launch`.
  int slot_for(uint32_t node, uint32_t launch) {
    if (plan_.slot_of[node] < 0) {
      plan_.slot_of[node] = first_temp_ + static_cast<int32_t>(plan_.temp_nodes.size());
      plan_.temp_nodes.push_back(node);
      plan_.temp_first_launch.push_back(launch);
      plan_.temp_last_launch.push_back(launch);
    }
    return plan_.slot_of[node];
  }

  // Slots in execution order, who writes each output, and when each temporary is first
  // written and last read.
  void follow_slots_in_execution_order() {
    writer_.assign(plan_.num_outputs, -1);
    launch_of_kernel_.assign(plan_.kernels.size(), 0);
    instance_of_kernel_.assign(plan_.kernels.size(), 0);
    for (uint32_t l = 0; l < plan_.launches.size(); ++l) {
      for (uint32_t i = 0; i < plan_.launches[l].kernels.size(); ++i) {
        const uint32_t k = plan_.launches[l].kernels[i];
        launch_of_kernel_[k] = l;
        instance_of_kernel_[k] = i;
        const Kernel& kernel = plan_.kernels[k];
        for (uint32_t node : kernel.input_nodes) {
          const int slot = slot_for(storage_node(graph_, node), l);
          if (slot >= first_temp_) plan_.temp_last_launch[slot - first_temp_] = l;
        }
        for (uint32_t node : kernel.output_nodes) {
          const int slot = slot_for(node, l);
          if (slot >= plan_.num_inputs && slot < first_temp_) {
            writer_[slot - plan_.num_inputs] = static_cast<int32_t>(k);
          }
        }
      }
    }
  }

  // The launches of a row group run interleaved, row block by row block: for ordering they
  // count as one, from the group's first launch to its last, and so do the temporaries'
  // lifetimes.
  void span_row_groups() {
    group_first_.assign(plan_.launches.size(), 0);
    group_last_.assign(plan_.launches.size(), 0);
    for (uint32_t l = 0; l < plan_.launches.size();) {
      const uint32_t count = std::max<uint32_t>(1, plan_.launches[l].row_group);
      for (uint32_t m = l; m < l + count; ++m) {
        group_first_[m] = l;
        group_last_[m] = l + count - 1;
      }
      l += count;
    }
    for (size_t t = 0; t < plan_.temp_nodes.size(); ++t) {
      plan_.temp_first_launch[t] = group_first_[plan_.temp_first_launch[t]];
      plan_.temp_last_launch[t] = group_last_[plan_.temp_last_launch[t]];
    }
  }

  // Each temporary's node, and per slot the kernels that read it (through views too).
  void index_readers() {
    readers_.assign(plan_.temp_nodes.size() + first_temp_, {});
    for (uint32_t k = 0; k < plan_.kernels.size(); ++k) {
      for (uint32_t node : plan_.kernels[k].input_nodes) {
        const int slot = plan_.slot_of[storage_node(graph_, node)];
        if (slot >= 0 && (readers_[slot].empty() || readers_[slot].back() != k)) {
          readers_[slot].push_back(k);
        }
      }
    }
  }

  // Whether kernel k, in a row group, reads slot `slot` only row for row: each block of the
  // group's rows reads only those rows of it, so a later launch of the group may overwrite
  // them.
  bool reads_rows(uint32_t k, int slot) {
    const Kernel& kernel = plan_.kernels[k];
    const PlannedLaunch& first = plan_.launches[group_first_[launch_of_kernel_[k]]];
    const PlannedLaunch& own = plan_.launches[launch_of_kernel_[k]];
    if (first.row_group <= 1) return false;
    const uint32_t instance = own.row_instance[instance_of_kernel_[k]];
    const int dims = first.row_dims[instance];
    const uint32_t row_node = first.row_nodes[instance];
    for (uint32_t node : kernel.input_nodes) {
      if (plan_.slot_of[storage_node(graph_, node)] != slot) continue;
      if (!plan_.assumptions.reads_storage_in_order(graph_, node) ||
          graph_.node(node).shape.rank() != iteration_shape(graph_, kernel).rank() ||
          !starts_with_rows(graph_, plan_, node, row_node, dims)) {
        return false;
      }
    }
    return true;
  }

  // Whether elementwise kernel k may write its output (of `out`'s dtype and size) over the
  // buffer of input slot `slot`: k reads it element for element (never through a view that
  // reorders it), and every other reader has finished before k's launch (or row group) starts
  // or reads only its rows earlier in k's row group. A kernel reads an input element for
  // element exactly when the input has as many elements as the iteration space (it broadcasts
  // to it, so no dim is expanded).
  bool may_overwrite(uint32_t k, int slot, uint32_t out) {
    const Kernel& kernel = plan_.kernels[k];
    const uint32_t in =
        slot < first_temp_ ? graph_.inputs[slot] : plan_.temp_nodes[slot - first_temp_];
    if (graph_.node(in).dtype != graph_.node(out).dtype ||
        !plan_.assumptions.same_numel(graph_, in, out) ||
        !plan_.assumptions.same_numel(graph_, in, kernel.shape_node)) {
      return false;
    }
    for (uint32_t node : kernel.input_nodes) {
      if (plan_.slot_of[storage_node(graph_, node)] == slot &&
          !plan_.assumptions.reads_storage_in_order(graph_, node)) {
        return false;
      }
    }
    const uint32_t launch = launch_of_kernel_[k];
    for (uint32_t other : readers_[slot]) {
      if (other == k || group_last_[launch_of_kernel_[other]] < group_first_[launch]) continue;
      // In k's row group: fine if it runs before k, reads only the rows it computes, and
      // iterates the rows of k's tensor (a group runs its tensors' blocks in any order).
      if (!reads_earlier_in_group(other, k, slot)) return false;
    }
    return true;
  }

  // Whether kernel `other`, a reader of `slot`, runs in kernel k's row group before k's launch,
  // reads the slot row for row, and iterates the rows of the same tensor of the group as k.
  bool reads_earlier_in_group(uint32_t other, uint32_t k, int slot) {
    const uint32_t launch = launch_of_kernel_[k];
    return group_first_[launch_of_kernel_[other]] == group_first_[launch] &&
           launch_of_kernel_[other] < launch && reads_rows(other, slot) &&
           row_instance_of(other) == row_instance_of(k);
  }

  // The tensor of its row group whose rows kernel k iterates.
  uint32_t row_instance_of(uint32_t k) const {
    return plan_.launches[launch_of_kernel_[k]].row_instance[instance_of_kernel_[k]];
  }

  // The graph inputs that launches of kernel k's row group before k's launch read, and k does
  // not (an 8-bit optimizer's old codes, read by the kernel that computes the moments, under
  // the kernel that writes the new codes).
  std::vector<int> inputs_read_before_in_group(uint32_t k) {
    std::vector<int> slots;
    const uint32_t launch = launch_of_kernel_[k];
    if (plan_.launches[group_first_[launch]].row_group <= 1) return slots;
    std::set<int> own;
    for (uint32_t node : plan_.kernels[k].input_nodes)
      own.insert(plan_.slot_of[storage_node(graph_, node)]);
    for (uint32_t l = group_first_[launch]; l < launch; ++l) {
      for (uint32_t other : plan_.launches[l].kernels) {
        for (uint32_t node : plan_.kernels[other].input_nodes) {
          const int slot = plan_.slot_of[storage_node(graph_, node)];
          if (slot < plan_.num_inputs && !own.count(slot) &&
              std::find(slots.begin(), slots.end(), slot) == slots.end()) {
            slots.push_back(slot);
          }
        }
      }
    }
    return slots;
  }

  // Whether elementwise kernel k of a row group may write its output (of `out`'s dtype and
  // size) over the buffer of graph input `slot`, which it does not read: every reader of the
  // slot runs before k in k's row group, reads it row for row and iterates k's tensor's rows,
  // so a block's rows of it are read before k writes the same rows (the output's rows are the
  // group's too, row for row, as k iterates them).
  bool may_overwrite_unread(uint32_t k, int slot, uint32_t out) {
    const Kernel& kernel = plan_.kernels[k];
    const uint32_t in = graph_.inputs[slot];
    if (graph_.node(in).dtype != graph_.node(out).dtype ||
        !plan_.assumptions.same_numel(graph_, in, out) ||
        !plan_.assumptions.same_numel(graph_, out, kernel.shape_node)) {
      return false;
    }
    for (uint32_t other : readers_[slot]) {
      if (!reads_earlier_in_group(other, k, slot)) return false;
    }
    return !readers_[slot].empty();
  }

  // Temporaries written over dying ones: the bias added to a GEMM's result, a gradient
  // scaled by clipping, a loss gradient over the logits it is computed from.
  void reuse_temporaries() {
    const size_t num_temps = plan_.temp_nodes.size();
    plan_.temp_reuses.assign(num_temps, -1);
    std::vector<char> taken(num_temps, 0);
    for (uint32_t l = 0; l < plan_.launches.size(); ++l) {
      for (uint32_t k : plan_.launches[l].kernels) {
        const Kernel& kernel = plan_.kernels[k];
        if (kernel.program.reduce != ReduceKind::None || kernel.opaque >= 0) continue;
        for (uint32_t out_node : kernel.output_nodes) {
          const int out_slot = plan_.slot_of[out_node];
          // A row-local temporary needs no buffer to take over, nor has one to give.
          if (out_slot < first_temp_ || plan_.temp_row_local[out_slot - first_temp_]) continue;
          for (uint32_t node : kernel.input_nodes) {
            const int slot = plan_.slot_of[storage_node(graph_, node)];
            if (slot < first_temp_ || slot == out_slot) continue;
            const size_t t = static_cast<size_t>(slot - first_temp_);
            if (taken[t] || plan_.temp_row_local[t] || !may_overwrite(k, slot, out_node)) continue;
            taken[t] = 1;
            plan_.temp_reuses[out_slot - first_temp_] = static_cast<int32_t>(t);
            break;
          }
        }
      }
    }
  }

  // Temporaries that one row group writes and reads, every reader row for row, and nothing
  // outside the group reads (ExecutionPlan::temp_row_local).
  void mark_row_local_temporaries() {
    const size_t num_temps = plan_.temp_nodes.size();
    plan_.temp_row_local.assign(num_temps, 0);
    std::vector<int64_t> writer(num_temps, -1);
    for (uint32_t k = 0; k < plan_.kernels.size(); ++k) {
      for (uint32_t node : plan_.kernels[k].output_nodes) {
        const int slot = plan_.slot_of[node];
        if (slot >= first_temp_) writer[static_cast<size_t>(slot - first_temp_)] = k;
      }
    }
    for (size_t t = 0; t < num_temps; ++t) {
      if (writer[t] < 0) continue;
      const uint32_t group = group_first_[launch_of_kernel_[static_cast<uint32_t>(writer[t])]];
      if (plan_.launches[group].row_group <= 1) continue;
      const int slot = first_temp_ + static_cast<int>(t);
      const std::vector<uint32_t>& readers = readers_[static_cast<size_t>(slot)];
      plan_.temp_row_local[t] =
          !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](uint32_t k) {
            return group_first_[launch_of_kernel_[k]] == group && reads_rows(k, slot);
          });
    }
  }

  // Graph outputs that may take over an input's buffer (a parameter updated by the optimizer
  // that the forward and backward passes read before), when written after the last launch
  // that can fail.
  void find_donation_candidates() {
    int64_t last_fallible = -1;
    for (uint32_t k = 0; k < plan_.kernels.size(); ++k) {
      const Kernel& kernel = plan_.kernels[k];
      if (kernel.opaque >= 0 &&
          may_fail_at_run_time(graph_.node(static_cast<uint32_t>(kernel.opaque)).op)) {
        last_fallible = std::max<int64_t>(last_fallible, group_last_[launch_of_kernel_[k]]);
      }
    }
    plan_.output_launch.assign(plan_.num_outputs, UINT32_MAX);
    plan_.donation_candidates.resize(plan_.num_outputs);
    for (int o = 0; o < plan_.num_outputs; ++o) {
      if (writer_[o] < 0) continue;
      plan_.output_launch[o] = group_first_[launch_of_kernel_[writer_[o]]];
      if (static_cast<int64_t>(plan_.output_launch[o]) <= last_fallible) continue;
      const Kernel& kernel = plan_.kernels[writer_[o]];
      if (kernel.program.reduce != ReduceKind::None || kernel.opaque >= 0) continue;
      for (uint32_t node : kernel.input_nodes) {
        const int slot = plan_.slot_of[storage_node(graph_, node)];
        if (slot >= plan_.num_inputs) continue;
        if (may_overwrite(writer_[o], slot, graph_.outputs[o])) {
          plan_.donation_candidates[o].push_back(slot);
        }
      }
      for (int slot : inputs_read_before_in_group(writer_[o])) {
        if (may_overwrite_unread(writer_[o], slot, graph_.outputs[o])) {
          plan_.donation_candidates[o].push_back(slot);
        }
      }
    }
  }

  const ir::Graph& graph_;
  const FusionOptions& options_;
  ExecutionPlan plan_;
  int first_temp_ = 0;                              // the first temporary's slot
  std::vector<int32_t> writer_;                     // per output, the kernel that writes it
  std::vector<uint32_t> launch_of_kernel_;          // per kernel
  std::vector<uint32_t> instance_of_kernel_;        // per kernel, its position in its launch
  std::vector<uint32_t> group_first_, group_last_;  // per launch, its row group's span
  std::vector<std::vector<uint32_t>> readers_;      // per slot, the kernels reading it
};

}  // namespace

ExecutionPlan plan_execution(const ir::Graph& graph, const FusionOptions& options) {
  return Planner(graph, options).run();
}

bool may_fail_at_run_time(ir::OpKind op) {
  switch (op) {
    case ir::OpKind::IndexSelect:
    case ir::OpKind::IndexAdd:
    case ir::OpKind::CheckIndex:
    case ir::OpKind::AllReduce:
    case ir::OpKind::AllGather:
    case ir::OpKind::ReduceScatter:
    case ir::OpKind::Broadcast:
      return true;
    default:
      return false;
  }
}

}  // namespace lt::compiler
