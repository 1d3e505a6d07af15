// The CPU device: memory it owns (64-byte aligned, so kernels vectorize), one in-order stream
// served by a worker thread, and kernels split across a pool of threads, one per core.
#include "backend/cpu/cpu_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_executable.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/cpu/thread_pool.h"
#include "backend/fault_injection.h"
#include "backend/registry.h"
#include "backend/stream.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cpu {

std::atomic<int> injected_failures{0};

namespace {

constexpr size_t kAlignment = 64;
// How far the host may run ahead of the device: two queued tasks (an execution queued behind
// the running one) keep tracing overlapped with execution. Each queued execution holds buffers
// for its outputs, so a deeper queue only multiplies memory: with 16, a data-parallel step whose
// averaged gradients are new outputs ran 16 steps ahead, held 16 sets of them, and spent most
// of its time faulting in fresh pages (2.4 s a step on bert-base, 0.4 s with 2).
constexpr size_t kMaxQueuedTasks = 2;

// Memory the OS can still give us, in bytes (MemAvailable).
int64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (meminfo >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return static_cast<int64_t>(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
}

// Backs the 2 MiB-aligned part of a large block with transparent huge pages where the system
// leaves them to the program (`madvise` mode, Debian's default): kernels and GEMMs stream
// through activations, weights and optimizer state tens of MiB at a time, one TLB entry per
// 4 KiB otherwise. A BERT-base training step ran 4-7% faster, fp32 and bf16 alike. Where huge
// pages are off this does nothing. The advice stays with the address range: a block that the C
// library keeps in its heap after it is freed may serve smaller allocations with huge pages.
void ask_for_huge_pages(void* data, size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  if (bytes < 2 * kHugePage) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// memcpy that accepts the null pointers of empty vectors.
void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

// Freed device buffers of 1 MiB or more, kept for the next allocation of the same size: a step
// allocates the same sizes as the one before it, and memory the C library returns to the OS
// (every block over its 32 MiB mmap threshold) costs a page fault per 4 KiB when it is touched
// again: a 48 MiB GEMM output cost 12,288 faults and a quarter of the GEMM's time, every step.
class BlockCache {
 public:
  static constexpr size_t kMinBytes = size_t{1} << 20;

  explicit BlockCache(size_t max_bytes) : max_bytes_(max_bytes) {}
  ~BlockCache() { release(); }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // A cached block of exactly `bytes`, or null.
  void* take(size_t bytes) {
    if (bytes < kMinBytes) return nullptr;
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(bytes);
    if (it == blocks_.end() || it->second.empty()) return nullptr;
    void* block = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= bytes;
    return block;
  }
  // Keeps `block` for reuse, or frees it when it is small or the cache is full.
  void give(void* block, size_t bytes) {
    if (bytes >= kMinBytes) {
      const std::lock_guard<std::mutex> lock(mu_);
      if (cached_bytes_ + bytes <= max_bytes_) {
        blocks_[bytes].push_back(block);
        cached_bytes_ += bytes;
        return;
      }
    }
    std::free(block);
  }
  // The arena kept for the next execution's temporaries, if one of at least `bytes` is kept
  // (executions run one at a time on the stream, so one arena is enough: the largest one
  // asked for, which serves the smaller graphs too). Null otherwise, having freed a kept
  // arena that is too small.
  std::pair<void*, size_t> take_arena(size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu_);
    std::pair<void*, size_t> arena = arena_;
    arena_ = {nullptr, 0};
    if (arena.second >= bytes) return arena;
    std::free(arena.first);
    return {nullptr, 0};
  }
  // Keeps `block` as the arena for later executions, unless a larger one is kept.
  void give_arena(void* block, size_t bytes) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (bytes < arena_.second) {
      std::free(block);
      return;
    }
    std::free(arena_.first);
    arena_ = {block, bytes};
  }
  // Frees every cached block and the kept arena (before giving up on an allocation).
  void release() {
    const std::lock_guard<std::mutex> lock(mu_);
    for (auto& [bytes, list] : blocks_) {
      for (void* block : list) std::free(block);
    }
    blocks_.clear();
    cached_bytes_ = 0;
    std::free(arena_.first);
    arena_ = {nullptr, 0};
  }

 private:
  const size_t max_bytes_;
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> blocks_;
  size_t cached_bytes_ = 0;
  std::pair<void*, size_t> arena_{nullptr, 0};
};

// The pool's capacity: the threads asked for, and at least one per core, so that
// lt::set_num_threads can go back up to the cores after asking for fewer.
int thread_count(int n) {
  return std::max(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

// The settings, with the choices this CPU makes for its kernels.
KernelSettings for_this_cpu(KernelSettings settings) {
  settings.decode_codes_by_permutes = byte_permutes_beat_gathers();
  settings.software_prefetch = software_prefetch_helps();
  return settings;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend(int index, const BackendSettings& settings)
      : index_(index),
        physical_memory_(static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE)),
        memory_limit_(settings.memory_limit),
        kernel_settings_(for_this_cpu(settings.kernels)),
        pool_(thread_count(settings.threads)),
        stream_(kMaxQueuedTasks) {
    threads_.store(settings.threads);
    stream_.enqueue([index] {
      profiler::set_thread_name(index == 0 ? "device stream"
                                           : "device stream (cpu:" + std::to_string(index) + ")");
    });
  }

  std::string name() const override { return "cpu:" + std::to_string(index_); }

  BufferPtr allocate(size_t bytes) override {
    const size_t rounded = round_up(bytes);
    check_capacity(bytes, rounded);
    static metrics::Counter& reused = metrics::counter("DeviceAllocationReused");
    void* data = cache_.take(rounded);
    if (data) {
      reused.add();
    } else {
      data = allocate_block(bytes, rounded);
    }
    return track(data, bytes, rounded, [this](void* p, size_t size) { cache_.give(p, size); });
  }

  bool host_addressable() const override { return true; }
  bool keeps_row_local_temporaries() const override { return true; }

  BufferPtr wrap_host_memory(void* data, size_t bytes, std::function<void()> release) override {
    return std::make_shared<Buffer>(data, bytes, [release = std::move(release)](void*, size_t) {
      if (release) release();
    });
  }

  // The arena for an execution's temporaries: the kept one when it is large enough (and fits
  // under the memory limit as it is), else a new one.
  BufferPtr take_arena(size_t bytes) {
    const size_t rounded = round_up(bytes);
    check_capacity(bytes, rounded);
    auto [data, size] = cache_.take_arena(rounded);
    if (data && bytes_in_use_.load() + static_cast<int64_t>(size) > memory_capacity()) {
      std::free(data);
      data = nullptr;
    }
    if (!data) {
      size = rounded;
      data = allocate_block(bytes, rounded);
    }
    return track(data, bytes, size, [this](void* p, size_t n) { cache_.give_arena(p, n); });
  }

  void transfer_to_device(const BufferPtr& dst, const void* src, size_t bytes,
                          bool synchronous) override {
    static metrics::Timer& time = metrics::timer("TransferToDeviceTime");
    metrics::ScopedTimer timer(time);
    profiler::Scope span(synchronous ? "transfer to device (sync)" : "transfer to device (async)",
                         "transfer");
    if (synchronous) {
      static metrics::Counter& sync = metrics::counter("TransferToDeviceSync");
      sync.add();
      // The copy waits its turn behind all queued work, and the host waits for the copy:
      // this is what a synchronous upload costs on a real device.
      std::promise<void> done;
      stream_.enqueue([&] {
        copy_bytes(dst->data(), src, bytes);
        done.set_value();
      });
      metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
      done.get_future().wait();
      return;
    }
    static metrics::Counter& async = metrics::counter("TransferToDeviceAsync");
    async.add();
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    stream_.enqueue([dst, staged] { copy_bytes(dst->data(), staged->data(), staged->size()); });
  }

  void transfer_from_device(const BufferPtr& src, void* dst, size_t bytes) override {
    static metrics::Counter& count = metrics::counter("TransferFromDevice");
    count.add();
    profiler::Scope span("transfer from device (waits)", "transfer");
    std::promise<Failure> done;
    stream_.enqueue([&] {
      if (src->failed()) {
        done.set_value(src->error());
        return;
      }
      copy_bytes(dst, src->data(), bytes);
      done.set_value(Failure());
    });
    Failure failure;
    {
      metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
      failure = done.get_future().get();
    }
    if (failure.empty()) return;
    stream_.dismiss_failure(failure);  // raised here, so not again by synchronize()
    failure.raise();
  }

  std::shared_ptr<CompiledGraph> compile(const ir::Graph& graph,
                                         const CompileOptions& options) override {
    return compile_graph(graph, options, kernel_settings());
  }

  void execute(std::shared_ptr<Executable> executable, ExecutionArgs args) override {
    static metrics::Counter& executions = metrics::counter("ExecuteComputation");
    static metrics::Counter& launches = metrics::counter("KernelLaunch");
    executions.add();
    launches.add(executable->num_launches);
    auto exe = std::static_pointer_cast<CpuExecutable>(std::move(executable));
    stream_.enqueue([this, exe, args = std::move(args)] {
      static metrics::Timer& time = metrics::timer("ExecuteTime");
      metrics::ScopedTimer timer(time);
      profiler::Scope span("execute", "device");
      size_t launches_begun = 0;
      try {
        if (injected_failures.load() > 0 && injected_failures.fetch_sub(1) > 0) {
          throw Error("injected kernel failure (testing)");
        }
        for (const BufferPtr& input : args.inputs) {
          if (input->failed()) input->error().raise("an input failed: ");
        }
        // The pool is the stream's: its size changes here, between executables.
        pool_.set_workers(threads_.load() > 0 ? threads_.load() : pool_.capacity());
        run_executable(
            *exe, args, pool_, [this](size_t bytes) { return take_arena(bytes); }, launches_begun);
      } catch (const std::exception& e) {
        const Failure failure = Failure::of(e, args.step);
        commit_nothing(args, exe->output_launch, launches_begun, failure,
                       [](Buffer& dst, const Buffer& src, size_t bytes) {
                         copy_bytes(dst.data(), src.data(), bytes);
                       });
        if (args.on_failure) args.on_failure();
        stream_.record_failure(failure);
      }
    });
  }

  DeviceEvent record_event() override { return stream_.record_event(); }
  void synchronize() override { stream_.synchronize_and_raise(); }

  Failure take_failure_before(int64_t step) override { return stream_.take_failure(step); }

  int64_t memory_capacity() const override {
    const int64_t limit = memory_limit_.load();
    return limit > 0 ? std::min(limit, physical_memory_) : physical_memory_;
  }
  int64_t memory_available() const override {
    return std::min(available_memory(), memory_capacity() - bytes_in_use_.load());
  }

  DeviceMemoryStats memory_stats() const override {
    return {bytes_in_use_.load(), peak_bytes_.load(), allocations_.load()};
  }

  void update_settings(const BackendSettings& settings) override {
    memory_limit_.store(settings.memory_limit);
    threads_.store(settings.threads);
    const std::lock_guard<std::mutex> lock(kernel_settings_mu_);
    kernel_settings_ = for_this_cpu(settings.kernels);
  }

  uint64_t compile_fingerprint() const override { return kernel_settings().native ? 1 : 2; }

  void wait_compiles() override { wait_background_compiles(); }
  size_t kernel_cache_entries() const override { return kernel_cache_size(); }
  // The kernels are the process's, shared by every CPU device: forgetting them is too.
  void clear_kernel_cache() override {
    wait_background_compiles();
    cpu::clear_kernel_cache();
  }

  std::string matmul_library(DType dtype) const override { return gemm_library(dtype); }
  std::string matmul_isa(DType dtype) const override { return gemm_isa(dtype); }
  // The system compiler builds kernels for this CPU (-march=native): its widest vectors.
  std::string kernel_isa() const override {
    if (!kernel_settings().native) return "interpreter";
    return __builtin_cpu_supports("avx512f") ? "avx512"
           : __builtin_cpu_supports("avx2")  ? "avx2"
                                             : "sse2";
  }

  KernelSettings kernel_settings() const {
    const std::lock_guard<std::mutex> lock(kernel_settings_mu_);
    return kernel_settings_;
  }

  void reset_peak_memory() override {
    peak_bytes_.store(bytes_in_use_.load());
    allocations_.store(0);
  }

 private:
  static size_t round_up(size_t bytes) {
    return std::max(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }

  void check_capacity(size_t bytes, size_t rounded) const {
    const int64_t limit = memory_capacity();
    if (bytes_in_use_.load() + static_cast<int64_t>(rounded) > limit) {
      throw_out_of_memory(bytes, std::max<int64_t>(0, limit - bytes_in_use_.load()));
    }
  }

  // A new block of `rounded` bytes for a request of `bytes`, within the device memory limit.
  void* allocate_block(size_t bytes, size_t rounded) {
    check_capacity(bytes, rounded);
    // Overcommit would let a huge request "succeed" and fail later on first touch; ask first.
    if (rounded > (size_t{64} << 20)) {
      if (static_cast<int64_t>(rounded) > available_memory()) cache_.release();
      const int64_t free = available_memory();
      if (static_cast<int64_t>(rounded) > free) throw_out_of_memory(bytes, free);
    }
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (!data) {
      cache_.release();
      data = std::aligned_alloc(kAlignment, rounded);
    }
    if (!data) throw_out_of_memory(bytes, available_memory());
    ask_for_huge_pages(data, rounded);
    return data;
  }

  // Counts `rounded` bytes in use until the buffer dies, then hands the block to `keep`.
  BufferPtr track(void* data, size_t bytes, size_t rounded,
                  std::function<void(void*, size_t)> keep) {
    const int64_t in_use =
        bytes_in_use_.fetch_add(static_cast<int64_t>(rounded)) + static_cast<int64_t>(rounded);
    int64_t peak = peak_bytes_.load();
    while (in_use > peak && !peak_bytes_.compare_exchange_weak(peak, in_use)) {
    }
    allocations_.fetch_add(1);
    metrics::counter("DeviceAllocation").add();
    return std::make_shared<Buffer>(data, bytes,
                                    [this, rounded, keep = std::move(keep)](void* p, size_t) {
                                      keep(p, rounded);
                                      bytes_in_use_.fetch_sub(static_cast<int64_t>(rounded));
                                    });
  }

  [[noreturn]] static void throw_out_of_memory(size_t bytes, int64_t free) {
    throw Error("allocate: cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                std::to_string(free) + " bytes free)");
  }

  const int index_;
  const int64_t physical_memory_;
  std::atomic<int64_t> memory_limit_;  // bytes; 0: all of the machine's memory
  mutable std::mutex kernel_settings_mu_;
  KernelSettings kernel_settings_;  // guarded by kernel_settings_mu_
  std::atomic<int64_t> bytes_in_use_{0}, peak_bytes_{0}, allocations_{0};
  // At most a quarter of the machine's memory held for reuse; destroyed after the stream and
  // the pool, so work still queued at destruction can free into it.
  BlockCache cache_{static_cast<size_t>(physical_memory_ / 4)};
  ThreadPool pool_;
  std::atomic<int> threads_{0};  // the pool's size for the next executables; 0: all of it
  Stream stream_;  // declared last: destroyed first, so queued work finishes while all is alive
};

}  // namespace

}  // namespace lt::backend::cpu

namespace lt::backend {

void inject_execution_failures(int count) {
  cpu::injected_failures.store(count);
}

namespace cpu {

std::unique_ptr<Backend> make_backend(int index, const BackendSettings& settings) {
  return std::make_unique<CpuBackend>(index, settings);
}

void register_backend() {
  backend::register_backend(DeviceType::cpu, make_backend);
}

}  // namespace cpu

}  // namespace lt::backend
