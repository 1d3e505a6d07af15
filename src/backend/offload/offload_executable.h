#pragma once
// A graph compiled for a device with its own memory: the plan every backend shares, its fused
// kernels and the routines they need built as one program in the device's dialect, and the
// launches bound to a graph's sizes, run in order on the device's queue from the backend's
// stream.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/kernel_instance.h"
#include "backend/offload/runtime.h"
#include "backend/opaque_op.h"
#include "compiler/execution_plan.h"

namespace lt::backend::offload {

// One launch of a step: a fused kernel over one or many instances (multi-tensor), with a fold
// after it for a reduction, or an opaque op's routines.
struct Launch {
  void* kernel = nullptr;  // the fused kernel; the routine's own for an opaque op
  const compiler::KernelProgram* program = nullptr;
  compiler::ReduceKind reduce = compiler::ReduceKind::None;
  DType value_dtype = DType::f32;   // reductions: what the kernel writes and the fold reads
  DType output_dtype = DType::f32;  // reductions: what the fold stores
  void* fold = nullptr;
  std::vector<Instance> instances;
  std::shared_ptr<const OpaqueOp> opaque;
  void* check = nullptr;    // index ops: the kernel that checks the ids first
  void* convert = nullptr;  // index_add of a wide dtype, check_index: the final conversion
};

class OffloadExecutable final : public Executable {
 public:
  int num_inputs = 0;
  int num_outputs = 0;
  std::vector<size_t> temp_bytes;  // per temporary slot
  std::vector<Launch> launches;
  std::vector<uint32_t> output_launch;
  // The last launch that may refuse its operands (an index out of range): the stream waits for
  // the device there and reads the checks' results before it launches what comes after.
  int64_t last_checked_launch = -1;
  void* copy[9] = {};  // the strided copy per element size (1, 2, 4, 8)
  // The compiled graph owns the kernels (and the programs the launches point into): held until
  // the last step queued with this executable has run, whatever the compile cache evicts.
  std::shared_ptr<const class OffloadCompiledGraph> compiled;
};

class OffloadCompiledGraph final : public CompiledGraph,
                                   public std::enable_shared_from_this<OffloadCompiledGraph> {
 public:
  compiler::ExecutionPlan plan;
  std::shared_ptr<void> program;
  std::map<std::string, std::shared_ptr<void>> kernels;  // by name
  // Per planned launch: its kernel's name, its fold's, and its routines' (check, convert).
  std::vector<std::string> kernel_names, fold_names, check_names, convert_names;
  std::string copy_names[9];
  std::shared_ptr<Executable> bind(const ir::Graph& graph, std::string* why) const override;
};

// Throws lt::Error naming an op the device has no routine for.
std::shared_ptr<OffloadCompiledGraph> compile_graph(const Runtime& device, const ir::Graph& graph,
                                                    const CompileOptions& options);

// Queues every launch in order, on the stream: slots are the step's buffers (inputs, outputs,
// then temporaries, which `allocate` provides, as it provides the launches' scratch). It waits
// for the device only where the step's index checks must pass before the launches after them,
// and where it fails. Returns the host memory the queued work still reads (scalar arrays being
// copied), which the caller keeps until the device has run the step. Throws what a launch or a
// check raised; `launches_begun` counts the launches started.
std::vector<std::shared_ptr<void>> run_executable(const Runtime& device,
                                                  const OffloadExecutable& exe,
                                                  const ExecutionArgs& args,
                                                  const std::function<BufferPtr(size_t)>& allocate,
                                                  size_t& launches_begun);

}  // namespace lt::backend::offload
