#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/buffer.h"
#include "compiler/fusion.h"
#include "ir/graph.h"
#include "lazytensor/runtime.h"

namespace lt::backend {

// A compiled graph bound to one graph's sizes: what runs. Backends derive their own; the
// executor sees only what it needs to choose buffers for the outputs.
class Executable {
 public:
  virtual ~Executable() = default;
  // For each graph output, the graph inputs whose buffers may receive it: same size, read
  // by the kernel that writes the output at the element it writes and by no kernel after it.
  // The executor picks one whose buffer nothing else holds (buffer donation).
  std::vector<std::vector<int>> donation_candidates;
  int64_t num_kernels = 0;
  int64_t num_launches = 0;
  int64_t temporary_bytes = 0;  // device memory for the temporaries while it runs
};

// A graph compiled once for every graph of its signature (same structure, and the same dims
// of 0 and 1; other sizes differ): its plan and kernels. Sizes are bound at launch.
class CompiledGraph {
 public:
  virtual ~CompiledGraph() = default;
  // The executable for `graph`'s sizes (graph has the signature this was compiled for), or
  // null when they break an assumption the plan rests on (`why` then says which): that graph
  // needs a compile of its own.
  virtual std::shared_ptr<Executable> bind(const ir::Graph& graph, std::string* why) const = 0;
  int64_t num_kernels = 0;
};

// How a graph is cut into kernels, as the runtime's settings were when its cut began (the
// graph's cache key holds them too).
struct CompileOptions {
  compiler::FusionOptions fusion;
};

struct ExecutionArgs {
  int64_t step = 0;                // for error messages
  std::vector<BufferPtr> inputs;   // one per graph input
  std::vector<BufferPtr> outputs;  // one per graph output (possibly an input's buffer)
  std::vector<double> scalars;     // one per graph scalar argument
  // Per output: the buffer that holds the value its tensor had before the step (its own
  // buffer when donated), or null for a new value. A step that fails commits nothing: these
  // outputs get their pre-step bits back and the others fail, so reading them raises why.
  std::vector<BufferPtr> rollback;
  // Called on the stream when the step fails, before any of its values can be read.
  std::function<void()> on_failure;
};

// A failed step's outputs, as every backend leaves them: those whose tensors had a value before
// the step get it back (a donated buffer still holds it while its writer has not begun: the plan
// donates only to launches after every launch that can fail; another buffer gets a copy, made by
// `copy(dst, src, bytes)`), and the others fail with the step's error.
void commit_nothing(const ExecutionArgs& args, const std::vector<uint32_t>& output_launch,
                    size_t launches_begun, const Failure& failure,
                    const std::function<void(Buffer& dst, const Buffer& src, size_t bytes)>& copy);

// What a backend is handed when it is built: the runtime fills it from its settings, and a
// backend reads no settings of its own.
// How a backend turns kernel programs into code it runs.
struct KernelSettings {
  bool native = true;  // false: interpret the programs, compile nothing
  // Native kernels start interpreted and switch once their code is compiled in the
  // background, so no step waits for the compiler. false: wait for it.
  bool tiered = true;
  std::string compiler = "c++";  // the command that compiles kernels (CPU: LT_CXX)
  std::string cache_dir;         // compiled kernels on disk
  size_t cache_bytes = 0;        // their byte bound
  size_t cache_entries = 0;      // kernels kept in memory
  // CPU: kernels that read stored 8-bit codes decode a block of them at a time by byte permutes
  // (where the CPU has AVX512_VBMI) instead of looking each up in their loop. The CPU backend
  // sets it where permutes beat gathers (cpu::byte_permutes_beat_gathers).
  bool decode_codes_by_permutes = false;
  // CPU: generated loops ask for each input's lines a block ahead in software, besides the
  // hardware prefetchers. The CPU backend sets it where that is faster
  // (cpu::software_prefetch_helps).
  bool software_prefetch = false;
};

struct BackendSettings {
  // Kernel threads; 0: one per core. The count when the device is built is the most it has.
  int threads = 0;
  int64_t memory_limit = 0;  // bytes a device may allocate; 0: all it has
  KernelSettings kernels;
};

// What the graph executor needs from a device, after LTC's BackendImplInterface. All device
// work runs in order on one stream; calls return once the work is queued unless they say
// they wait.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Throws lt::Error naming the request and the free memory when it cannot be satisfied.
  virtual BufferPtr allocate(size_t bytes) = 0;
  // Whether the host reads and writes this device's memory in place (a CPU's does).
  virtual bool host_addressable() const = 0;
  // Whether it runs row groups row block by row block with their row-local temporaries in
  // scratch of its own (compiler::ExecutionPlan::temp_row_local): such a temporary then costs
  // no device memory, only a block's rows of scratch for each worker.
  virtual bool keeps_row_local_temporaries() const { return false; }
  // A buffer over host memory its owner keeps, for a host-addressable device; `release` runs
  // when the buffer dies.
  virtual BufferPtr wrap_host_memory(void* data, size_t bytes, std::function<void()> release) = 0;
  // Copies host bytes to dst. Asynchronous: the bytes are staged now and copied in stream
  // order. Synchronous: also waits until the copy is done (and so for all work before it).
  virtual void transfer_to_device(const BufferPtr& dst, const void* src, size_t bytes,
                                  bool synchronous) = 0;
  // Waits for src's value, then copies it to host memory. Throws if src failed.
  virtual void transfer_from_device(const BufferPtr& src, void* dst, size_t bytes) = 0;

  virtual std::shared_ptr<CompiledGraph> compile(const ir::Graph& graph,
                                                 const CompileOptions& options) = 0;
  virtual void execute(std::shared_ptr<Executable> executable, ExecutionArgs args) = 0;
  // Enqueues a marker that records when the stream reaches it.
  virtual DeviceEvent record_event() = 0;
  // Waits for all queued work; throws the first failure since the last call.
  virtual void synchronize() = 0;
  // The first failure that no call has raised yet, if its step is before `step` (empty if
  // none), without waiting; it is not raised again.
  virtual Failure take_failure_before(int64_t step) = 0;

  virtual DeviceMemoryStats memory_stats() const = 0;
  // Total device memory, and what can still be allocated, in bytes.
  virtual int64_t memory_capacity() const = 0;
  virtual int64_t memory_available() const = 0;
  virtual void reset_peak_memory() = 0;
  // The runtime's settings changed (all but the threads take effect); never during a cut.
  virtual void update_settings(const BackendSettings& settings) = 0;
  // What of the settings changes the executables compile() makes, as bits for the graph cache's
  // key: an executable is found again only under the same fingerprint.
  virtual uint64_t compile_fingerprint() const = 0;
  // Waits until every kernel compiling in the background is done.
  virtual void wait_compiles() = 0;
  // Kernels compiled so far and kept in memory, and forgetting them (the backends of one kind
  // may share one cache: the CPU's are the process's).
  virtual size_t kernel_cache_entries() const = 0;
  virtual void clear_kernel_cache() = 0;

  // The library that computes this device's matrix products for `dtype`, as
  // lt::matmul_library reports it.
  virtual std::string matmul_library(DType dtype) const = 0;
  // The instructions they run on ("amx", "avx512_bf16", "avx512", "avx2"; a device's kind where
  // it has its own), as lt::matmul_isa reports it; and those of the generated kernels.
  virtual std::string matmul_isa(DType dtype) const = 0;
  virtual std::string kernel_isa() const = 0;
};

}  // namespace lt::backend

namespace lt {

struct DeviceEvent::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::chrono::steady_clock::time_point time;
  void complete() {
    {
      std::lock_guard<std::mutex> lock(mu);
      time = std::chrono::steady_clock::now();
      done = true;
    }
    cv.notify_all();
  }
};

}  // namespace lt
