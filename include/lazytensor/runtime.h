#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/dtype.h"

namespace lt {

class Tensor;

// Cuts the trace: every live tensor with a pending computation, traced on any thread, becomes
// an output of one graph per device, which is compiled (or found in the compile cache by its
// structure) and launched on that device's stream. Returns without waiting for the device.
// Dead tensors are never computed; with nothing pending it does nothing. Safe to call from any
// thread, also while other threads trace (an op happens wholly before or after a cut).
void mark_step();
// Blocks until every launched computation and transfer on every device has finished. Throws
// lt::Error if one of them failed since the last wait (the failed tensors also throw when read).
void wait_device_ops();

// A step that fails (an index out of range, no memory, a failed collective) commits nothing:
// every tensor it would have updated in place keeps its value from before the step, and its
// new values throw its error when read. The error is raised by the first read of one of them,
// by wait_device_ops() or by the next mark_step(). Host state that tracing a step changes
// registers here how to put it back (optimizers their step counts, the generator its offset):
// when the failure is raised, the undos of the most recent step run if that step failed.
void on_step_failure(std::function<void()> undo);

// The language of the hints in errors and warnings: "c++" (lt::NoGradGuard, lt::mark_step())
// or "python" (`with lazytensor.no_grad():`, lazytensor.mark_step()). The Python package sets
// "python" when it is imported. lt::Error for other names.
void set_front_end(const std::string& language);
std::string front_end();
// Where in the user's code an op is being traced ("train.py:42"), asked once per op while
// LT_DEBUG is on: a recompile's reason then names the line that made the op where the graphs
// differ. The Python package gives the innermost frame outside the package; none by default.
void set_trace_location_provider(std::function<std::string()> provider);

// A marker in the device stream, like a CUDA event: it completes when all work launched
// before it has finished, and remembers when that was.
class DeviceEvent {
 public:
  struct State;
  explicit DeviceEvent(std::shared_ptr<State> state) : state_(std::move(state)) {}
  void wait() const;
  bool done() const;
  // Seconds from `earlier` completing to this event completing (waits for both).
  double seconds_since(const DeviceEvent& earlier) const;
  // Seconds since the process's steady-clock epoch at which the event completed (waits).
  double completion_seconds() const;

 private:
  std::shared_ptr<State> state_;
};
// An event on the default device's stream.
DeviceEvent record_event();

// How a plain number passed to an op reaches the device (docs/runtime.md, "Scalar policies").
enum class ScalarPolicy {
  argument,  // a kernel argument: no upload, no recompile, whatever the value (default)
  cached,    // device data from an LRU cache keyed by value: one synchronous upload per new value
  uncached,  // device data uploaded synchronously on every use (torch-xla 1.13's regression)
  constant,  // baked into the graph: every new value is a new graph and a recompile
};
const char* scalar_policy_name(ScalarPolicy policy);
ScalarPolicy parse_scalar_policy(const std::string& name);  // throws lt::Error if unknown

// Settings. Each starts from its environment variable when the process first uses the engine:
//   LT_SCALAR_POLICY=argument|cached|uncached|constant   LT_SPECIAL_SCALARS=0|1
//   LT_COMPILE_CACHE_SIZE=N   LT_DATA_CACHE_SIZE=N   LT_COMPILER=native|interpreter
//   LT_KERNEL_CACHE_DIR=path  LT_KERNEL_CACHE_BYTES=N  LT_NUM_THREADS=N  LT_DEBUG=0|1
//   LT_DEVICE_MEMORY_LIMIT=bytes  LT_TIERED_COMPILE=0|1  LT_MAX_KERNEL_OPS=N
//   LT_GRAPH_WARN_NODES=N  LT_AUTO_CUT_NODES=N
void set_scalar_policy(ScalarPolicy policy);
ScalarPolicy scalar_policy();
// With the cached and uncached policies, 0 and +-1 become graph constants, as in torch-xla.
void set_special_scalars(bool enabled);
bool special_scalars();
void set_compile_cache_size(size_t graphs);
size_t compile_cache_size();
void set_data_cache_size(size_t entries);
size_t data_cache_size();
// The threads a CPU device's kernels and matrix products run on, from the next step on, as
// torch.set_num_threads: at least 1, at most the device's threads (one per core, or
// LT_NUM_THREADS when that is more). get_num_threads() is the count asked for, one per core
// unless set.
void set_num_threads(int threads);
int get_num_threads();
// "native": kernels are generated as C++, compiled by the system compiler and loaded (fast
// kernels; the first compile of a kernel takes a fraction of a second, then it is cached on
// disk). "interpreter": the same kernel programs run by a tile interpreter (no compiler needed).
// If the system compiler fails, native kernels keep running on the interpreter (said once on
// stderr; the counter NativeCompileFailure counts it); the setting itself does not change.
void set_kernel_compiler(const std::string& name);
std::string kernel_compiler();
// The library that runs the CPU device's matrix products of `dtype` (f32, bf16 or f64), with
// its version: "oneDNN 2.6.3", "OpenBLAS 0.3.21". bf16 products on a CPU for which oneDNN has
// no bf16 kernel (it has them with AVX-512 or AMX) have their operands widened to f32 first, at
// f32's speed less the widening: "OpenBLAS 0.3.21 (bf16 operands widened to f32)".
// lt::Error for other dtypes.
std::string matmul_library(DType dtype);
// The instructions the default device's products of `dtype` run on: "amx", "avx512_bf16",
// "avx512", "avx2" or "sse4.1" on the CPU (oneDNN's dispatch: ONEDNN_MAX_CPU_ISA caps it),
// the device kind ("opencl", "cuda") elsewhere; and those its generated kernels (the glue
// between products) are compiled for: "avx512", "avx2", "sse2", or "interpreter".
std::string matmul_isa(DType dtype);
std::string kernel_isa();
// Tiered compilation (on by default): a step whose native kernels are not compiled yet runs at
// once on the interpreter while the system compiler works in the background, on every core;
// later launches switch to the native code as it arrives. Off: a step waits for its kernels.
void set_tiered_compilation(bool enabled);
bool tiered_compilation();
// Blocks until every background kernel compile has finished (a benchmark's warm-up).
void wait_kernel_compiles();
// The longest program a fused kernel may have, in ops (LT_MAX_KERNEL_OPS, default 512).
// Longer chains are cut into several kernels: compile time grows faster than program length.
void set_max_kernel_ops(size_t ops);
// Launches that share rows (a reduction over trailing dims and the launches that use its result
// row for row: softmax, layer norm, cross-entropy) run row block by row block, so each block is
// read from memory once (LT_ROW_GROUPS, default on). Off: launch by launch, for comparison.
void set_row_groups(bool enabled);
bool row_groups();
// Sizes as kernel arguments (LT_SYMBOLIC_SIZES, default on): a graph's cache key keeps only
// the sizes that are 0 or 1, so a new batch size or sequence length finds the graph compiled
// for another and binds its own sizes at launch (counted by the SizeBind counter). Off: each
// size compiles a graph of its own, for comparison.
void set_symbolic_sizes(bool enabled);
bool symbolic_sizes();
// A loop that never calls mark_step() grows one graph without bound. Past `nodes` live IR
// nodes (LT_GRAPH_WARN_NODES, default 1,000,000) a warning says so once on stderr; past
// LT_AUTO_CUT_NODES (default 4,000,000; 0: never) the next op cuts the graph as mark_step()
// would. A cut changes no value, only where the step boundaries are. Sooner than that, a loop
// that reads a value every step (loss.item()) but never cuts is warned by its fourth step:
// each such read runs every earlier step again. Setting the threshold lets both warnings be
// given once more.
void set_graph_warn_nodes(size_t nodes);
void set_auto_cut_nodes(size_t nodes);
// IR nodes alive now, over all threads (other threads' latest changes are counted in batches
// of 64).
int64_t live_ir_nodes();
// Where natively compiled kernels are cached on disk (LT_KERNEL_CACHE_DIR; by default
// $XDG_CACHE_HOME/lazytensor/kernels or ~/.cache/lazytensor/kernels), and its size bound.
void set_kernel_cache_dir(const std::string& path);
std::string kernel_cache_dir();
void set_kernel_cache_bytes(size_t bytes);
// Caps the device memory the engine may use (LT_DEVICE_MEMORY_LIMIT, bytes; 0: no cap beyond
// the machine's memory). Beyond it, allocations fail with lt::Error.
void set_device_memory_limit(size_t bytes);
// With debug on, every compile after the first explains itself on stderr.
void set_debug(bool enabled);
bool debug();

// Why the most recent compile-cache miss happened: the nearest cached graph and the first
// difference. Empty before the second compile.
std::string last_recompile_reason();
// Compiles per mark_step so far, in step order (index 0 is the first step).
std::vector<int64_t> compiles_per_step();

struct DeviceMemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // buffers allocated since start (or the last reset_peak)
};
// Of the default device (lt::default_device()).
DeviceMemoryStats device_memory_stats();
void reset_peak_device_memory();

// What the most recent mark_step launched, for tests and tools.
struct StepStats {
  int64_t step = 0;             // 1 for the first mark_step that launched anything
  int64_t graph_nodes = 0;      // IR nodes in the graph (leaves included)
  int64_t outputs = 0;          // tensors written
  int64_t inputs = 0;           // device buffers read
  int64_t scalar_args = 0;      // scalars passed as kernel arguments
  int64_t kernels = 0;          // fused kernels (before merging into multi-tensor launches)
  int64_t launches = 0;         // kernel launches
  int64_t donated_buffers = 0;  // outputs written into the buffer of an input nothing else holds
  // Device memory the step's temporaries (values that are no output) needed at once: one
  // arena, packed from their lifetimes for the step's sizes.
  int64_t temporary_bytes = 0;
  bool cache_hit = false;
};
StepStats last_step_stats();

// Forgets every compiled graph and kernel held in memory (the disk cache of native kernels
// stays), so that the next step compiles as a first one does. Waits for background compiles.
void clear_compile_caches();

// Number of compiled graphs and kernels currently cached in memory.
size_t compile_cache_entries();
size_t kernel_cache_entries();

// What lt::check_codegen (lazytensor/codegen_check.h) reports: each fused kernel of a step as a
// device kind's compiler built it, without the device.
struct KernelCompileCheck {
  std::string name;
  bool compiled = false;  // in the compiled binary, with the compiler's report of it
  // A reduction's fold runs outside the generated kernel on the CPU and is not generated for
  // this target yet: the check compiles the elementwise body that feeds it.
  bool reduction = false;
  int registers = 0;
  int stack_bytes = 0;
  int spill_bytes = 0;  // spill stores and loads
};

struct CodegenCheck {
  std::string device;    // "cuda"
  std::string arch;      // "sm_90"
  std::string compiler;  // "NVRTC 13.0"
  bool compiled = false;
  std::string log;  // the compiler's log: errors, and its per-kernel report
  std::vector<KernelCompileCheck> kernels;
  int opaque_ops = 0;  // matrix products, gathers, sorts: each target's own routines, not generated
};

}  // namespace lt
