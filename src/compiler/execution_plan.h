#pragma once
// How a graph's kernels run, decided once when it compiles and the same for every backend:
// the fused kernels, their grouping into launches, the buffer each value lives in, where each
// scalar argument comes from, and which outputs may take over an input's buffer.
#include <cstdint>
#include <vector>

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace lt::compiler {

// Kernels of one level with the same program, run as one launch over all their tensors
// (horizontal fusion: an AdamW step over every parameter is one launch).
struct PlannedLaunch {
  std::vector<uint32_t> kernels;  // indices into ExecutionPlan::kernels, in order
  // Row groups: on its first launch, row_group > 1 says that this launch and the next
  // row_group - 1 iterate the same `rows` (the leading dims of a reduction over trailing dims,
  // as softmax, layer norm and cross-entropy have) and read each other's results only row for
  // row. A backend may run them row block by row block: the block's rows are read from memory
  // once and from cache by the others, instead of once per launch.
  uint32_t row_group = 1;
  int64_t rows = 0;
};

struct ExecutionPlan {
  std::vector<Kernel> kernels;
  std::vector<PlannedLaunch> launches;  // in execution order
  // Buffer slots: the graph's inputs, then its outputs, then temporaries.
  int num_inputs = 0;
  int num_outputs = 0;
  std::vector<size_t> temp_bytes;
  // Per temporary: the launch that writes it and the last launch that reads it. A temporary
  // needs memory only in between, so a long chain cut into many kernels holds few at a time.
  std::vector<uint32_t> temp_first_launch;
  std::vector<uint32_t> temp_last_launch;
  // Per temporary: the temporary whose buffer it takes over, or -1 for a buffer of its own. An
  // elementwise kernel that is the last reader of a temporary of its output's size and dtype,
  // reading it element for element, writes its output over it (the bias added to a GEMM's
  // result, a gradient scaled by clipping, the loss gradient over the logits): one buffer
  // instead of two.
  std::vector<int32_t> temp_reuses;
  // All temporaries live in one arena of arena_bytes, temporary t at temp_offset[t] (a
  // multiple of kArenaAlignment): a step needs one allocation, and the same arena serves every
  // step. Temporaries whose lifetimes overlap never share bytes (one that takes over another
  // shares its offset), so the arena is the step's peak of live temporaries plus what packing
  // them loses.
  std::vector<size_t> temp_offset;
  size_t arena_bytes = 0;
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
};

// Opaque ops whose routine may refuse its operands at run time (an index out of range, a
// failed collective).
bool may_fail_at_run_time(ir::OpKind op);

// Each temporary starts on a cache line of its own.
constexpr size_t kArenaAlignment = 64;

ExecutionPlan plan_execution(const ir::Graph& graph, const FusionOptions& options);

}  // namespace lt::compiler
