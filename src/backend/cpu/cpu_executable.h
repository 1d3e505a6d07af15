#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/cpu/opaque_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/kernel_instance.h"
#include "compiler/fusion.h"

namespace lt::backend::cpu {

// A range of one instance's work: elements (elementwise), output elements (reductions with
// several outputs) or folded elements of the single output (partial = where its partial sum
// goes). A column reduction's unit is columns [begin, end) over rows [row_begin, row_end); when
// the rows are split into chunks, its `end - begin` partial sums go to `partial` onwards.
struct WorkUnit {
  uint32_t instance;
  int64_t begin, end;
  int64_t partial = -1;
  int64_t row_begin = 0, row_end = 0;
};

// One kernel launch: the same compiled program over one or many instances (multi-tensor).
struct Launch {
  std::shared_ptr<const CompiledKernel> kernel;
  compiler::ReduceKind reduce = compiler::ReduceKind::None;
  DType dtype = DType::f32;         // reductions: the folded element type
  DType output_dtype = DType::f32;  // reductions: the stored element type
  // A reduction whose program is its one input, of the folded type (a bias gradient's column
  // sum): a direct input is folded where it lies, without running the kernel to copy it.
  bool folds_input = false;
  // An opaque op (matmul, gather, ...) runs its own routine instead of a kernel.
  std::shared_ptr<const OpaqueOp> opaque;
  std::vector<Instance> instances;
  std::vector<WorkUnit> units;
  int64_t num_partials = 0;  // doubles
  int num_scalars = 0;
  // On the first launch of a row group (compiler::PlannedLaunch): the group's size, and per
  // instance of the group (tensor), for the graph's sizes: its rows, the elements of a row in
  // its widest launch, and the rows of a block (about kUnitElements elements of that launch).
  uint32_t row_group = 1;
  std::vector<int64_t> rows;
  std::vector<int64_t> widest_row;
  std::vector<int64_t> rows_per_block;
  // On the first launch of a row group: its blocks of rows, tensor after tensor, which the
  // workers share out.
  struct RowBlock {
    uint32_t instance;
    int64_t begin, end;
  };
  std::vector<RowBlock> row_blocks;
  // On every launch of a row group: per kernel instance, the group instance it belongs to, and
  // per group instance, the kernel instances that iterate its rows.
  std::vector<uint32_t> row_instance;
  std::vector<std::vector<uint32_t>> row_members;
  // On the first launch of a row group: the temporaries only the group writes and reads, row
  // for row (compiler::ExecutionPlan::temp_row_local), by slot, bytes a row and the group
  // instance that writes them, where that instance's rows are at most kUnitElements elements
  // wide. They have no arena bytes: each worker keeps a block's rows of them (at most
  // kUnitElements elements each) in scratch of its own, reused from block to block and step to
  // step, at `offset` (an instance's temporaries one after another; a block holds one
  // instance's), in row_local_bytes of scratch.
  struct RowLocal {
    size_t slot;
    int64_t row_bytes;
    uint32_t instance;
    size_t offset = 0;
  };
  std::vector<RowLocal> row_locals;
  size_t row_local_bytes = 0;
  // What the launch computes, for the profiler's timeline: "matmul bf16 [1024, 384] x ...",
  // "reduction of 7 ops over [1024, 384] (dims 0) -> f32, 2 inputs, 1 output".
  std::string description;
};

class CpuExecutable final : public Executable {
 public:
  // Buffer slots: graph inputs, then graph outputs, then temporaries.
  int num_inputs = 0;
  int num_outputs = 0;
  // Temporaries: where each starts in the arena (compiler::layout_arena, for the graph's sizes);
  // the arena's size is Executable::temporary_bytes.
  std::vector<size_t> temp_offset;
  std::vector<Launch> launches;
  // Per output: the launch that writes it (a failed step knows which donated buffers still
  // hold their pre-step values).
  std::vector<uint32_t> output_launch;
};

// A graph's plan and kernels, for every graph of its signature.
class CpuCompiledGraph final : public CompiledGraph {
 public:
  compiler::ExecutionPlan plan;
  // Per planned launch: its compiled program (null for an opaque op).
  std::vector<std::shared_ptr<const CompiledKernel>> kernels;
  // Per planned launch: whether its kernel is the interpreter's alone, the launch being too
  // small for the graph it was compiled for to be worth a native compile; and the settings
  // that bind() asks for native code with when other sizes make it larger.
  std::vector<char> interpreted_only;
  KernelSettings settings;
  // Each kernel instance's iteration space collapsed for strided reads, its work cut into
  // units for the pool, and the arena laid out, for graph's sizes.
  std::shared_ptr<Executable> bind(const ir::Graph& graph, std::string* why) const override;
};

std::shared_ptr<CpuCompiledGraph> compile_graph(const ir::Graph& graph,
                                                const CompileOptions& options,
                                                const KernelSettings& kernels);

// Runs every launch in order on the pool, the temporaries in an arena from `take_arena`.
// `launches_begun` counts the launches started, so that a failure knows what was written.
void run_executable(const CpuExecutable& executable, const ExecutionArgs& args, ThreadPool& pool,
                    const std::function<BufferPtr(size_t)>& take_arena, size_t& launches_begun);

}  // namespace lt::backend::cpu
