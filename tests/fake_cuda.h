#pragma once
// A fake CUDA driver and compiler for the CUDA backend's tests on machines without a GPU. The
// driver is a table of the driver API's calls (backend/cuda/cuda_driver.h) over host memory and
// one worker thread per stream that runs what is queued in order: copies, frees, events and
// kernels. The compiler builds the CUDA source the backend generates as a host shared library
// with the system compiler, through a shim that gives CUDA's built-in variables, __shared__
// memory and __syncthreads() their meaning on the host: a launch runs its blocks one after
// another, each block's threads as host threads that meet at a barrier.
//
// What the fake checks, beyond running the kernels: copies and launches touch only live device
// memory; a staged upload's pinned memory is not changed between the upload's queueing and its
// run (what the device would read then); pinned memory is not freed while a copy from it is
// queued. Faults are counted, and the next synchronization reports one as an illegal address
// (700), as a GPU would. A test can hold a stream (nothing queued runs) to see that the host
// never waits for the device where it need not, and inject a failure into a later launch.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_source.h"
#include "lazytensor/error.h"

namespace fake_cuda {

using lt::backend::cuda::CuContext;
using lt::backend::cuda::CuDevice;
using lt::backend::cuda::CuDevicePtr;
using lt::backend::cuda::CuEvent;
using lt::backend::cuda::CuFunction;
using lt::backend::cuda::CuModule;
using lt::backend::cuda::CuResult;
using lt::backend::cuda::CuStream;

constexpr CuResult kInvalidValue = 1;
constexpr CuResult kOutOfMemory = 2;
constexpr CuResult kNotFound = 500;
constexpr CuResult kNotReady = 600;
constexpr CuResult kIllegalAddress = 700;
constexpr CuResult kLaunchFailed = 719;

// The host shim the kernels' CUDA source is compiled with.
constexpr const char* kHostShim = R"(
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* lt_host_barrier = nullptr;
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
// One block runs at a time, so a function's statics are the block's shared memory.
#define __shared__ static
#define __syncthreads() lt_host_barrier->arrive_and_wait()
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
using std::fma; using std::sqrt; using std::exp; using std::log;
)";

// Appended: each kernel's launcher, which copies the arguments as the driver does at a launch
// and returns the launch to run later.
constexpr const char* kHostLauncher = R"(
struct LtHostLaunch { virtual ~LtHostLaunch() = default; virtual void run(unsigned grid, unsigned block) = 0; };
template <class... A>
struct LtHostLaunchOf final : LtHostLaunch {
  void (*f)(A...);
  std::tuple<std::decay_t<A>...> args;
  template <size_t... I>
  LtHostLaunchOf(void (*fn)(A...), void** p, std::index_sequence<I...>)
      : f(fn), args(*static_cast<std::decay_t<A>*>(p[I])...) {}
  void run(unsigned grid, unsigned block) override {
    gridDim.x = grid;
    blockDim.x = block;
    auto body = [&] { std::apply(f, args); };
    std::barrier<> sync(block);
    lt_host_barrier = &sync;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t) {
      threads.emplace_back([&, t] {
        threadIdx.x = t;
        for (unsigned b = 0; b < grid; ++b) {
          blockIdx.x = b;
          body();
          sync.arrive_and_wait();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
  }
};
template <class... A>
LtHostLaunch* lt_host_bind(void (*f)(A...), void** p) {
  return new LtHostLaunchOf<A...>(f, p, std::index_sequence_for<A...>{});
}
)";

// Builds the generated CUDA source on the host; the "image" is the shared library's path.
class HostCompiler final : public lt::backend::cuda::KernelCompiler {
 public:
  HostCompiler() {
    char pattern[] = "/tmp/lt-fake-cuda-XXXXXX";
    dir_ = mkdtemp(pattern);
  }
  ~HostCompiler() override { std::filesystem::remove_all(dir_); }
  std::string version() const override { return "the host's C++ compiler (fake CUDA)"; }
  std::string image(const std::string& source, const std::string& arch) const override {
    static const std::regex kernel(
        R"((?:extern "C" __global__|LT_KERNEL)\s+(?:LT_GROUP_SIZE\(\d+\)\s+)?void\s+(\w+)\s*\()");
    std::string launchers = kHostLauncher;
    std::set<std::string> names;
    for (std::sregex_iterator it(source.begin(), source.end(), kernel), end; it != end; ++it) {
      const std::string name = (*it)[1].str();
      if (!names.insert(name).second) continue;
      launchers += "extern \"C\" LtHostLaunch* " + name + "__lt_host(void** p) { return " +
                   "lt_host_bind(" + name + ", p); }\n";
    }
    const int n = count_.fetch_add(1);
    const std::string stem = dir_ + "/program" + std::to_string(n);
    std::ofstream(stem + ".cpp") << kHostShim << source << launchers;
    const std::string command = "c++ -std=c++20 -O1 -w -shared -fPIC -pthread -fwrapv " +
                                std::string("-ffp-contract=off -o ") + stem + ".so " + stem +
                                ".cpp > " + stem + ".log 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(stem + ".log");
      throw lt::Error("fake cuda: the kernels did not compile for " + arch + "\n" +
                      std::string(std::istreambuf_iterator<char>(log), {}));
    }
    return stem + ".so";  // with its terminating NUL, as cuModuleLoadData reads it
  }

 private:
  std::string dir_;
  mutable std::atomic<int> count_{0};
};

struct Event {
  bool done = true;
};

// The fake GPU: one process-wide instance, as a driver is.
class Gpu {
 public:
  static Gpu& get() {
    static Gpu* gpu = new Gpu;  // never destroyed: the backend's stream outlives the tests
    return *gpu;
  }

  // Nothing queued runs until release().
  void hold() {
    std::lock_guard lock(mutex_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      held_ = false;
    }
    wake_.notify_all();
  }
  // The launch `n` launches from now fails when it runs.
  void fail_launch_after(int n) {
    std::lock_guard lock(mutex_);
    fail_in_ = n;
  }
  int64_t launches() const { return launches_.load(); }
  int64_t live_allocations() {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(allocations_.size());
  }
  int64_t live_pinned() {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(pinned_.size());
  }
  int64_t queued() {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(queue_.size());
  }
  // What the fake caught: each is a bug of the backend.
  std::vector<std::string> faults() {
    std::lock_guard lock(mutex_);
    return faults_;
  }

  lt::backend::cuda::Driver driver() const {
    lt::backend::cuda::Driver d;
    d.init = [](unsigned) -> CuResult { return 0; };
    d.driver_version = [](int* v) -> CuResult { return *v = 13000, 0; };
    d.device_count = [](int* c) -> CuResult { return *c = 1, 0; };
    d.device_get = [](CuDevice* d, int ordinal) -> CuResult {
      return ordinal == 0 ? (*d = 0, 0) : kInvalidValue;
    };
    d.device_name = [](char* name, int length, CuDevice) -> CuResult {
      std::snprintf(name, static_cast<size_t>(length), "Fake GPU");
      return 0;
    };
    d.device_attribute = [](int* v, int attribute, CuDevice) -> CuResult {
      *v = attribute == 75 ? 9 : attribute == 76 ? 0 : 1;
      return 0;
    };
    d.device_total_memory = [](size_t* bytes, CuDevice) -> CuResult {
      return *bytes = size_t{1} << 32, 0;
    };
    d.primary_context_retain = [](CuContext* c, CuDevice) -> CuResult { return *c = &get(), 0; };
    d.primary_context_release = [](CuDevice) -> CuResult { return 0; };
    d.context_set_current = [](CuContext c) -> CuResult { return c == &get() ? 0 : kInvalidValue; };
    d.stream_create = [](CuStream* s, unsigned) -> CuResult { return *s = &get(), 0; };
    d.stream_synchronize = [](CuStream) -> CuResult { return get().synchronize(); };
    d.stream_destroy = [](CuStream) -> CuResult { return 0; };
    d.event_create = [](CuEvent* e, unsigned) -> CuResult { return *e = new Event, 0; };
    d.event_record = [](CuEvent e, CuStream) -> CuResult {
      auto* event = static_cast<Event*>(e);
      std::lock_guard lock(get().mutex_);
      event->done = false;
      get().enqueue_locked([event] { event->done = true; });
      return 0;
    };
    d.event_query = [](CuEvent e) -> CuResult {
      std::lock_guard lock(get().mutex_);
      return static_cast<Event*>(e)->done ? 0 : kNotReady;
    };
    d.event_destroy = [](CuEvent e) -> CuResult {
      delete static_cast<Event*>(e);
      return 0;
    };
    d.mem_alloc_async = [](CuDevicePtr* p, size_t bytes, CuStream) -> CuResult {
      return get().allocate(p, bytes);
    };
    d.mem_free_async = [](CuDevicePtr p, CuStream) -> CuResult { return get().free_async(p); };
    d.mem_host_alloc = [](void** p, size_t bytes, unsigned) -> CuResult {
      *p = std::malloc(bytes);
      std::lock_guard lock(get().mutex_);
      get().pinned_[*p] = bytes;
      return 0;
    };
    d.mem_free_host = [](void* p) -> CuResult { return get().free_host(p); };
    d.memcpy_htod_async = [](CuDevicePtr dst, const void* src, size_t bytes, CuStream) -> CuResult {
      return get().copy_in(dst, src, bytes);
    };
    d.memcpy_dtoh_async = [](void* dst, CuDevicePtr src, size_t bytes, CuStream) -> CuResult {
      return get().copy_out(dst, src, bytes);
    };
    d.module_load_data = [](CuModule* m, const void* image) -> CuResult {
      void* library = dlopen(static_cast<const char*>(image), RTLD_NOW | RTLD_LOCAL);
      return library == nullptr ? kInvalidValue : (*m = library, 0);
    };
    d.module_unload = [](CuModule m) -> CuResult { return dlclose(m) == 0 ? 0 : kInvalidValue; };
    d.module_get_function = [](CuFunction* f, CuModule m, const char* name) -> CuResult {
      void* symbol = dlsym(m, (std::string(name) + "__lt_host").c_str());
      return symbol == nullptr ? kNotFound : (*f = symbol, 0);
    };
    d.launch_kernel = [](CuFunction f, unsigned grid, unsigned, unsigned, unsigned block, unsigned,
                         unsigned, unsigned, CuStream, void** params,
                         void**) -> CuResult { return get().launch(f, grid, block, params); };
    d.error_string = [](CuResult r, const char** text) -> CuResult {
      *text = r == kIllegalAddress ? "an illegal memory access was encountered"
              : r == kLaunchFailed ? "unspecified launch failure"
              : r == kOutOfMemory  ? "out of memory"
              : r == kInvalidValue ? "invalid argument"
                                   : "fake error";
      return 0;
    };
    return d;
  }

 private:
  struct HostLaunch {
    virtual ~HostLaunch() = default;
    virtual void run(unsigned grid, unsigned block) = 0;
  };

  Gpu() : worker_([this] { work(); }) { worker_.detach(); }

  void enqueue_locked(std::function<void()> op) {
    queue_.push_back(std::move(op));
    wake_.notify_all();
  }

  void fault(const std::string& what) {  // with mutex_ held
    faults_.push_back(what);
    error_ = kIllegalAddress;
  }

  // Whether [p, p + bytes) lies in one live allocation (mutex_ held).
  bool live(CuDevicePtr p, size_t bytes) const {
    auto it = allocations_.upper_bound(p);
    if (it == allocations_.begin()) return false;
    --it;
    return p + bytes <= it->first + it->second;
  }

  CuResult allocate(CuDevicePtr* p, size_t bytes) {
    void* memory = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (memory == nullptr) return kOutOfMemory;
    std::lock_guard lock(mutex_);
    *p = reinterpret_cast<uintptr_t>(memory);
    allocations_[*p] = bytes;
    return 0;
  }

  CuResult free_async(CuDevicePtr p) {
    std::lock_guard lock(mutex_);
    if (!allocations_.count(p)) return kInvalidValue;
    enqueue_locked([this, p] {
      allocations_.erase(p);
      std::free(reinterpret_cast<void*>(p));
    });
    return 0;
  }

  CuResult free_host(void* p) {
    std::lock_guard lock(mutex_);
    if (!pinned_.count(p)) return kInvalidValue;
    if (pinned_in_use_.count(p)) fault("pinned memory freed while a copy from it was queued");
    pinned_.erase(p);
    std::free(p);
    return 0;
  }

  CuResult copy_in(CuDevicePtr dst, const void* src, size_t bytes) {
    std::lock_guard lock(mutex_);
    if (!pinned_.count(const_cast<void*>(src))) {
      faults_.push_back("an upload from pageable memory: it would wait for the device");
    }
    auto snapshot = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                        static_cast<const char*>(src) + bytes);
    pinned_in_use_.insert(const_cast<void*>(src));
    enqueue_locked([this, dst, src, bytes, snapshot] {
      pinned_in_use_.erase(pinned_in_use_.find(const_cast<void*>(src)));
      if (std::memcmp(src, snapshot->data(), bytes) != 0) {
        fault("staged memory was overwritten before its upload ran");
      }
      if (!live(dst, bytes)) return fault("an upload to memory that is not allocated");
      std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    });
    return 0;
  }

  CuResult copy_out(void* dst, CuDevicePtr src, size_t bytes) {
    std::lock_guard lock(mutex_);
    enqueue_locked([this, dst, src, bytes] {
      if (!live(src, bytes)) return fault("a read of memory that is not allocated");
      std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    });
    return 0;
  }

  CuResult launch(CuFunction f, unsigned grid, unsigned block, void** params) {
    using Bind = HostLaunch* (*)(void**);
    std::shared_ptr<HostLaunch> bound(reinterpret_cast<Bind>(f)(params));
    launches_.fetch_add(1);
    std::lock_guard lock(mutex_);
    const bool fails = fail_in_ == 0;
    if (fail_in_ >= 0) --fail_in_;
    enqueue_locked([this, bound, grid, block, fails] {
      if (fails) {
        error_ = kLaunchFailed;
        return;
      }
      mutex_.unlock();  // the kernel runs without the lock: it may take long
      bound->run(grid, block);
      mutex_.lock();
    });
    return 0;
  }

  // Runs the queue in order; each op with mutex_ held.
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return !held_ && !queue_.empty(); });
      std::function<void()> op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      op();
      running_ = false;
      idle_.notify_all();
    }
  }

  CuResult synchronize() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !running_; });
    const CuResult error = error_;
    error_ = 0;  // reported once (a real GPU's illegal address would stay)
    return error;
  }

  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> queue_;
  bool held_ = false, running_ = false;
  CuResult error_ = 0;
  int fail_in_ = -1;
  std::atomic<int64_t> launches_{0};
  std::map<CuDevicePtr, size_t> allocations_;
  std::map<void*, size_t> pinned_;
  std::multiset<void*> pinned_in_use_;
  std::vector<std::string> faults_;
  std::thread worker_;
};

}  // namespace fake_cuda
