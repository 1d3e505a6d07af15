#pragma once
// How a graph's kernels run, decided once when it compiles and the same for every backend:
// the fused kernels, their grouping into launches, the buffer each value lives in, where each
// scalar argument comes from, and which outputs may take over an input's buffer. A plan holds
// no sizes: it serves every graph of its signature whose sizes satisfy its assumptions, and
// what depends on sizes (the arena's layout, a row group's row count) is computed for each.
#include <cstdint>
#include <vector>

#include "compiler/fusion.h"
#include "compiler/size_assumptions.h"
#include "ir/graph.h"

namespace lt::compiler {

// Kernels of one level with the same program, run as one launch over all their tensors
// (horizontal fusion: an AdamW step over every parameter is one launch).
struct PlannedLaunch {
  std::vector<uint32_t> kernels;  // indices into ExecutionPlan::kernels, in order
  // Row groups: on its first launch, row_group > 1 says that this launch and the next
  // row_group - 1 iterate the same rows (leading dims of their iteration spaces: the kept dims
  // of a reduction over trailing dims, as softmax, layer norm and cross-entropy have) and read
  // each other's results only row for row. A backend may run them row block by row block: the
  // block's rows are read from memory once and from cache by the others, instead of once per
  // launch. Multi-tensor launches group tensor by tensor: each kernel of the group iterates the
  // rows of one of the group's instances (its tensor) and reads only what that instance's
  // kernels write.
  uint32_t row_group = 1;
  // On a group's first launch, per instance of the group (one per tensor of a multi-tensor
  // group): the node whose first row_dims dims are its rows.
  std::vector<int> row_dims;
  std::vector<uint32_t> row_nodes;
  // On every launch of a group: per kernel, the instance whose rows it iterates.
  std::vector<uint32_t> row_instance;
};

struct ExecutionPlan {
  std::vector<Kernel> kernels;
  std::vector<PlannedLaunch> launches;  // in execution order
  // Buffer slots: the graph's inputs, then its outputs, then temporaries.
  int num_inputs = 0;
  int num_outputs = 0;
  std::vector<uint32_t> temp_nodes;  // the graph node each temporary holds
  // Per temporary: the launch that writes it and the last launch that reads it, widened to
  // whole row groups (whose launches run interleaved). A temporary needs memory only in
  // between, so a long chain cut into many kernels holds few at a time.
  std::vector<uint32_t> temp_first_launch;
  std::vector<uint32_t> temp_last_launch;
  // Per temporary: the temporary whose buffer it takes over, or -1 for a buffer of its own. An
  // elementwise kernel that is the last reader of a temporary of its output's size and dtype,
  // reading it element for element, writes its output over it (the bias added to a GEMM's
  // result, a gradient scaled by clipping, the loss gradient over the logits): one buffer
  // instead of two.
  std::vector<int32_t> temp_reuses;
  // Per temporary: 1 when one row group writes it and only that group reads it, each launch
  // row for row (softmax's exponentials, a block's moments before their maximum): a backend
  // that runs the group row block by row block may keep the block's rows of it in scratch
  // memory of its own, reused block after block, instead of in the arena
  // (layout_arena(..., in_scratch)). Never one that takes over a buffer or is taken over.
  std::vector<char> temp_row_local;
  std::vector<int32_t> slot_of;  // per graph node: its buffer slot, or -1 if never in memory
  std::vector<uint32_t> scalar_position;  // per graph node: its index among graph.scalars
  // For each graph output, the inputs whose buffers may receive it: same dtype and size, read
  // by the kernel that writes the output element for element, and by no kernel after it. The
  // executor takes one that nothing else holds (donation). Only outputs written after every
  // launch that can fail (index checks, collectives) have candidates: a failed step then
  // finds every donated buffer as it was, and commits nothing.
  std::vector<std::vector<int>> donation_candidates;
  // Per output: the launch that writes it (UINT32_MAX for none).
  std::vector<uint32_t> output_launch;
  // What the decisions above assumed of sizes; the plan serves a graph where they hold.
  SizeAssumptions assumptions;
};

// Where a plan's temporaries live for one graph's sizes: all in one arena of arena_bytes,
// temporary t at temp_offset[t] (a multiple of kArenaAlignment), so a step needs one
// allocation and the same arena serves every step of those sizes. Temporaries whose lifetimes
// overlap never share bytes (one that takes over another shares its offset), so the arena is
// the step's peak of live temporaries plus what packing them loses. Temporaries marked in
// `in_scratch` (row-local ones a backend keeps in scratch of its own; empty: none) take no arena
// bytes (their offset is 0, unused).
struct ArenaLayout {
  std::vector<size_t> temp_offset;
  size_t arena_bytes = 0;
};
ArenaLayout layout_arena(const ExecutionPlan& plan, const ir::Graph& graph,
                         const std::vector<char>& in_scratch = {});

// The rows of the row group that `launch` begins, for graph's sizes: those of its `instance`-th
// kernel (a multi-tensor group has rows for each tensor).
int64_t row_group_rows(const ExecutionPlan& plan, const ir::Graph& graph, size_t launch,
                       size_t instance = 0);

// Opaque ops whose routine may refuse its operands at run time (an index out of range, a
// failed collective).
bool may_fail_at_run_time(ir::OpKind op);

// Each temporary starts on a cache line of its own.
constexpr size_t kArenaAlignment = 64;

ExecutionPlan plan_execution(const ir::Graph& graph, const FusionOptions& options);

}  // namespace lt::compiler
