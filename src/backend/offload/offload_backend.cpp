// A device with its own memory (OpenCL, CUDA) through its offload::Runtime: buffers in the
// device's memory with the engine's own capacity accounting (PoCL enforces none), one in-order
// queue driven from the backend's stream, so the host traces on while the stream uploads and
// launches, and steps that fail commit nothing. A step's launches are queued without waiting
// for the device to run the step before: the stream waits only when kMaxStepsInFlight steps are
// queued, for a read, an event or a synchronization, after a step's index checks, and when a
// step fails.
#include "backend/offload/offload_backend.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/offload/offload_executable.h"
#include "backend/offload/runtime.h"
#include "backend/stream.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::offload {

namespace {

// As the CPU's stream: two queued tasks keep tracing overlapped with the device.
constexpr size_t kMaxQueuedTasks = 2;
// Steps queued on the device and not yet run, at most: the device works on one while the next
// is queued behind it, and the memory the host has released but the device still reads (freed
// in stream order) stays within about two steps' worth.
constexpr size_t kMaxStepsInFlight = 2;

class OffloadBackend final : public Backend {
 public:
  OffloadBackend(std::shared_ptr<const Runtime> device, int index, const BackendSettings& settings)
      : name_(device->kind() + ":" + std::to_string(index)),
        device_(std::move(device)),
        memory_limit_(settings.memory_limit),
        stream_(kMaxQueuedTasks) {
    stream_.enqueue([name = name_] { profiler::set_thread_name("device stream (" + name + ")"); });
  }

  std::string name() const override { return name_; }

  BufferPtr allocate(size_t bytes) override {
    // Counted before the driver is asked, so that two threads cannot both pass the limit. What
    // the runtime holds for itself (cuBLASLt's workspace) comes off the limit.
    const int64_t limit = memory_capacity() - device_->reserved_bytes();
    const int64_t size = static_cast<int64_t>(bytes);
    const int64_t in_use = bytes_in_use_.fetch_add(size) + size;
    if (in_use > limit) {
      bytes_in_use_.fetch_sub(size);
      throw Error("allocate: cannot allocate " + std::to_string(bytes) +
                  " bytes of device memory (" +
                  std::to_string(std::max<int64_t>(0, limit - (in_use - size))) + " bytes free)");
    }
    std::shared_ptr<void> mem;
    try {
      mem = device_->allocate(bytes);
    } catch (...) {
      bytes_in_use_.fetch_sub(size);
      throw;
    }
    int64_t peak = peak_bytes_.load();
    while (in_use > peak && !peak_bytes_.compare_exchange_weak(peak, in_use)) {
    }
    allocations_.fetch_add(1);
    metrics::counter("DeviceAllocation").add();
    return std::make_shared<Buffer>(mem.get(), bytes, [this, mem](void*, size_t n) {
      bytes_in_use_.fetch_sub(static_cast<int64_t>(n));
    });
  }

  bool host_addressable() const override { return false; }

  BufferPtr wrap_host_memory(void*, size_t, std::function<void()>) override {
    throw Error(name() + ": device memory is not host memory; copy the values to the device");
  }

  void transfer_to_device(const BufferPtr& dst, const void* src, size_t bytes,
                          bool synchronous) override {
    static metrics::Timer& time = metrics::timer("TransferToDeviceTime");
    metrics::ScopedTimer timer(time);
    if (synchronous) {
      static metrics::Counter& sync = metrics::counter("TransferToDeviceSync");
      sync.add();
      std::promise<std::string> done;  // the driver's error, if the copy failed
      stream_.enqueue([&] {
        try {
          device_->write(dst->data(), src, bytes, true);
          done.set_value("");
        } catch (const std::exception& e) {
          done.set_value(e.what());
        }
      });
      std::string error;
      {
        metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
        error = done.get_future().get();
      }
      if (!error.empty()) throw Error("transfer to " + name() + ": " + error);
      return;
    }
    static metrics::Counter& async = metrics::counter("TransferToDeviceAsync");
    async.add();
    // Staged now, copied in stream order: the caller may reuse its memory at once. A copy the
    // driver refuses fails the buffer (reading it raises why) and is reported by the next wait.
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    stream_.enqueue([this, dst, staged] {
      try {
        device_->write(dst->data(), staged->data(), staged->size(), true);
      } catch (const std::exception& e) {
        const Failure failure{std::string("transfer to ") + name() + ": " + e.what(), false, 0};
        dst->set_error(failure);
        stream_.record_failure(failure);
      }
    });
  }

  void transfer_from_device(const BufferPtr& src, void* dst, size_t bytes) override {
    static metrics::Counter& count = metrics::counter("TransferFromDevice");
    count.add();
    // The step's failure that src carries, or the driver's error reading it.
    std::promise<std::pair<Failure, std::string>> done;
    stream_.enqueue([&] {
      if (src->failed()) {
        done.set_value({src->error(), ""});
        return;
      }
      try {
        device_->read(src->data(), dst, bytes);
        done.set_value({});
      } catch (const std::exception& e) {
        done.set_value({Failure(), e.what()});
      }
    });
    std::pair<Failure, std::string> outcome;
    {
      metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
      outcome = done.get_future().get();
    }
    if (!outcome.second.empty()) throw Error("transfer from " + name() + ": " + outcome.second);
    if (outcome.first.empty()) return;
    stream_.dismiss_failure(outcome.first);  // raised here, so not again by synchronize()
    outcome.first.raise();
  }

  std::shared_ptr<CompiledGraph> compile(const ir::Graph& graph,
                                         const CompileOptions& options) override {
    auto compiled = compile_graph(*device_, graph, options);
    programs_built_.fetch_add(1);
    return compiled;
  }

  void execute(std::shared_ptr<Executable> executable, ExecutionArgs args) override {
    static metrics::Counter& executions = metrics::counter("ExecuteComputation");
    static metrics::Counter& launches = metrics::counter("KernelLaunch");
    executions.add();
    launches.add(executable->num_launches);
    auto exe = std::static_pointer_cast<OffloadExecutable>(std::move(executable));
    stream_.enqueue([this, exe, args = std::move(args)] {
      static metrics::Timer& time = metrics::timer("ExecuteTime");
      metrics::ScopedTimer timer(time);
      profiler::Scope span("execute", "device");
      size_t launches_begun = 0;
      // Declared outside the try: when the step fails after queuing copies from these arrays,
      // they outlive the wait for the device in the failure handling.
      std::vector<std::shared_ptr<void>> host;
      try {
        for (const BufferPtr& input : args.inputs) {
          if (input->failed()) input->error().raise("an input failed: ");
        }
        while (in_flight_.size() >= kMaxStepsInFlight) {
          device_->wait(in_flight_.front().marker);
          in_flight_.pop_front();
        }
        host = run_executable(
            *device_, *exe, args, [this](size_t bytes) { return allocate(bytes); }, launches_begun);
        in_flight_.push_back({device_->mark(), std::move(host)});
      } catch (const std::exception& e) {
        const Failure failure = Failure::of(e, args.step);
        try {
          device_->finish();
          // Donated buffers are written only after every check has passed (run_executable).
          commit_nothing(args, exe->output_launch, launches_begun, failure,
                         [this](Buffer& dst, const Buffer& src, size_t bytes) {
                           std::vector<char> staged(bytes);
                           device_->read(src.data(), staged.data(), bytes);
                           device_->write(dst.data(), staged.data(), bytes, true);
                         });
        } catch (const std::exception&) {
          for (const BufferPtr& output : args.outputs) output->set_error(failure);
        }
        in_flight_.clear();
        if (args.on_failure) args.on_failure();
        stream_.record_failure(failure);
      }
    });
  }

  // Complete once the device has run everything queued before them.
  DeviceEvent record_event() override {
    auto state = std::make_shared<DeviceEvent::State>();
    stream_.enqueue([this, state] {
      finish_queued_steps();
      state->complete();
    });
    return DeviceEvent(state);
  }
  void synchronize() override {
    stream_.enqueue([this] { finish_queued_steps(); });
    stream_.synchronize_and_raise();
  }

  Failure take_failure_before(int64_t step) override { return stream_.take_failure(step); }

  int64_t memory_capacity() const override {
    const int64_t limit = memory_limit_.load();
    const int64_t device = device_->global_memory_bytes();
    return limit > 0 && (device <= 0 || limit < device) ? limit : device;
  }
  int64_t memory_available() const override {
    return std::max<int64_t>(0,
                             memory_capacity() - device_->reserved_bytes() - bytes_in_use_.load());
  }

  // The engine's buffers and what the runtime holds for itself.
  DeviceMemoryStats memory_stats() const override {
    const int64_t reserved = device_->reserved_bytes();
    return {bytes_in_use_.load() + reserved, peak_bytes_.load() + reserved, allocations_.load()};
  }
  void reset_peak_memory() override {
    peak_bytes_.store(bytes_in_use_.load());
    allocations_.store(0);
  }

  void update_settings(const BackendSettings& settings) override {
    memory_limit_.store(settings.memory_limit);
  }
  // Kernels are the device's dialect whatever the settings (the CPU's interpreter and native
  // compiler settings do not apply).
  uint64_t compile_fingerprint() const override { return 0; }
  void wait_compiles() override {}
  // Each compiled graph builds one program and holds it.
  size_t kernel_cache_entries() const override { return programs_built_.load(); }
  void clear_kernel_cache() override {}

  ~OffloadBackend() override {
    // The host memory the queued steps read is released with the backend.
    stream_.enqueue([this] { finish_queued_steps(); });
    stream_.synchronize();
  }

  std::string matmul_library(DType) const override { return device_->matmul_library(); }
  std::string matmul_isa(DType) const override { return device_->kind(); }
  std::string kernel_isa() const override { return device_->kind(); }

 private:
  // On the stream: waits until the device has run every queued step. The device's error is
  // the next synchronization's to raise.
  void finish_queued_steps() {
    try {
      device_->finish();
    } catch (const std::exception& e) {
      stream_.record_failure({name() + ": " + e.what(), false, 0});
    }
    in_flight_.clear();
  }

  const std::string name_;
  const std::shared_ptr<const Runtime> device_;
  std::atomic<int64_t> memory_limit_;  // bytes; 0: what the device reports
  std::atomic<int64_t> bytes_in_use_{0}, peak_bytes_{0}, allocations_{0};
  std::atomic<size_t> programs_built_{0};
  // Steps queued on the device, oldest first (the stream's alone): a marker after each, and the
  // host memory its queued copies still read.
  struct InFlight {
    std::shared_ptr<void> marker;
    std::vector<std::shared_ptr<void>> host;
  };
  std::deque<InFlight> in_flight_;
  Stream stream_;  // declared last: destroyed first, so queued work finishes while all is alive
};

}  // namespace

std::unique_ptr<Backend> make_backend(std::shared_ptr<const Runtime> device, int index,
                                      const BackendSettings& settings) {
  return std::make_unique<OffloadBackend>(std::move(device), index, settings);
}

}  // namespace lt::backend::offload
