#pragma once
// A fake CUDA driver and compiler for the CUDA backend's tests on machines without a GPU. The
// driver is a table of the driver API's calls (backend/cuda/cuda_driver.h) over host memory and
// one worker thread per stream that runs what is queued in order: copies, frees, events and
// kernels. The compiler builds the CUDA source the backend generates as a host shared library
// with the system compiler, through a shim that gives CUDA's built-in variables, __shared__
// memory and __syncthreads() their meaning on the host: a launch runs its blocks one after
// another, each block's threads as host threads that meet at a barrier (or one after another,
// for a kernel without barriers).
//
// What the fake checks, beyond running the kernels: copies and products touch only live device
// memory (a kernel's pointer arguments are not checked: their types are the kernel's); a staged
// upload's pinned memory is not changed between the upload's queueing and its run (what the
// device would read then); pinned memory is not freed while a copy from it is queued; uploads
// come from pinned memory. Faults are recorded, and synchronizations report an illegal address
// (700), as a GPU would. A test can hold a stream (nothing queued runs) to see that the host
// never waits for the device where it need not, and inject a failure into a later launch. As on
// a GPU, an error of the device stays: every later synchronization reports it, until a test
// calls recover() (a process would have to end).
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
#include <iterator>
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
#include "ir/op_semantics.h"
#include "lazytensor/error.h"

namespace fake_cuda {

using lt::backend::cuda::CuContext;
using lt::backend::cuda::CuDevice;
using lt::backend::cuda::CuDevicePtr;
using lt::backend::cuda::CuEvent;
using lt::backend::cuda::CuFunction;
using lt::backend::cuda::CuMemPool;
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
  bool cooperative;  // its threads meet at barriers
  std::tuple<std::decay_t<A>...> args;
  template <size_t... I>
  LtHostLaunchOf(void (*fn)(A...), bool meets, void** p, std::index_sequence<I...>)
      : f(fn), cooperative(meets), args(*static_cast<std::decay_t<A>*>(p[I])...) {}
  void run(unsigned grid, unsigned block) override {
    gridDim.x = grid;
    blockDim.x = block;
    auto body = [&] { std::apply(f, args); };
    if (!cooperative) {  // no barrier: the block's threads run one after another
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        for (unsigned t = 0; t < block; ++t) {
          threadIdx.x = t;
          body();
        }
      }
      return;
    }
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
LtHostLaunch* lt_host_bind(void (*f)(A...), bool cooperative, void** p) {
  return new LtHostLaunchOf<A...>(f, cooperative, p, std::index_sequence_for<A...>{});
}
)";

// The fake's "compiler": the image of a program is the host source the fake driver builds when
// the module is loaded (the generated CUDA source after the host shim, with each kernel's
// launcher). Images stay valid in any process, so the backend's disk cache keeps them as it
// keeps CUBINs.
class HostCompiler final : public lt::backend::cuda::KernelCompiler {
 public:
  std::string version() const override { return "the host's C++ compiler (fake CUDA)"; }
  std::string image(const std::string& source, const std::string& /*arch*/) const override {
    static const std::regex kernel(
        R"((?:extern "C" __global__|LT_KERNEL)\s+(?:LT_GROUP_SIZE\(\d+\)\s+)?void\s+(\w+)\s*\()");
    std::string launchers = kHostLauncher;
    std::set<std::string> names;
    const std::sregex_iterator end;
    for (std::sregex_iterator it(source.begin(), source.end(), kernel); it != end; ++it) {
      const std::string name = (*it)[1].str();
      if (!names.insert(name).second) continue;
      // The kernel's text runs to the next kernel's signature: whether its threads meet.
      const auto next = std::next(it);
      const size_t from = static_cast<size_t>(it->position());
      const size_t to = next == end ? source.size() : static_cast<size_t>(next->position());
      const std::string text = source.substr(from, to - from);
      const bool cooperative = text.find("LT_BARRIER") != std::string::npos ||
                               text.find("__syncthreads") != std::string::npos;
      launchers += "extern \"C\" LtHostLaunch* " + name + "__lt_host(void** p) { return " +
                   "lt_host_bind(" + name + ", " + (cooperative ? "true" : "false") + ", p); }\n";
    }
    images.fetch_add(1);
    return kHostShim + source + launchers;
  }
  // Images made, in this process.
  static inline std::atomic<int64_t> images{0};
};

struct Event {
  bool done = true;
};

// cuBLASLt's descriptors, as the fake keeps them.
struct MatmulDesc {
  int compute = 0, scale = 0;
};
struct MatrixLayout {
  int type = 0;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batches = 1;
  int64_t stride = 0;
};

// One element of a matrix as double, and back, by cudaDataType: 16-bit floats through the
// engine's own conversions (rounded to nearest even on the way back).
inline double load_element(const void* base, int type, int64_t i) {
  switch (type) {
    case 0:
      return static_cast<const float*>(base)[i];
    case 1:
      return static_cast<const double*>(base)[i];
    case 2:
      return lt_kernel::lt_f16_load(static_cast<const uint16_t*>(base)[i]);
    default:
      return lt_kernel::lt_bf16_load(static_cast<const uint16_t*>(base)[i]);
  }
}
inline void store_element(void* base, int type, int64_t i, double value) {
  switch (type) {
    case 0:
      static_cast<float*>(base)[i] = static_cast<float>(value);
      return;
    case 1:
      static_cast<double*>(base)[i] = value;
      return;
    case 2:
      static_cast<uint16_t*>(base)[i] = lt_kernel::lt_f16_store(static_cast<float>(value));
      return;
    default:
      static_cast<uint16_t*>(base)[i] = lt_kernel::lt_bf16_store(static_cast<float>(value));
  }
}

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
  // The launch `n` launches from now fails when it runs (-1: none).
  void fail_launch_after(int n) {
    std::lock_guard lock(mutex_);
    fail_in_ = n;
  }
  // Forgets the device's error and the faults recorded, and injects no failure.
  void recover() {
    std::lock_guard lock(mutex_);
    error_ = 0;
    fail_in_ = -1;
    faults_.clear();
  }
  int64_t launches() const { return launches_.load(); }
  // Waits until everything queued has run (an error stays for the next synchronization).
  void drain() {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return queue_.empty() && !running_; });
  }
  int64_t live_allocations() {
    std::lock_guard lock(mutex_);
    return static_cast<int64_t>(allocations_.size());
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

  // Products the fake cuBLASLt has run and heuristics it was asked; setting refuse_products
  // makes its heuristic find no algorithm (as for a shape the library has none for).
  std::atomic<int64_t> products{0}, heuristics{0};
  std::atomic<bool> refuse_products{false};

  lt::backend::cuda::BlasLt blas() const {
    lt::backend::cuda::BlasLt b;
    b.create = [](void** handle) -> int { return *handle = &get(), 0; };
    b.destroy = [](void*) -> int { return 0; };
    b.version = []() -> size_t { return 130000; };
    b.desc_create = [](void** desc, int compute, int scale) -> int {
      *desc = new MatmulDesc{compute, scale};
      return 0;
    };
    b.desc_destroy = [](void* desc) -> int {
      delete static_cast<MatmulDesc*>(desc);
      return 0;
    };
    b.layout_create = [](void** layout, int type, uint64_t rows, uint64_t cols, int64_t ld) -> int {
      if (ld < static_cast<int64_t>(rows)) return 7;  // CUBLAS_STATUS_INVALID_VALUE
      *layout = new MatrixLayout{type, rows, cols, ld};
      return 0;
    };
    b.layout_set = [](void* layout, int attribute, const void* value, size_t bytes) -> int {
      auto& l = *static_cast<MatrixLayout*>(layout);
      if (attribute == 5 && bytes == 4) return std::memcpy(&l.batches, value, 4), 0;
      if (attribute == 6 && bytes == 8) return std::memcpy(&l.stride, value, 8), 0;
      return 7;
    };
    b.layout_destroy = [](void* layout) -> int {
      delete static_cast<MatrixLayout*>(layout);
      return 0;
    };
    b.preference_create = [](void** preference) -> int { return *preference = new size_t(0), 0; };
    b.preference_set = [](void* preference, int, const void* value, size_t) -> int {
      std::memcpy(preference, value, sizeof(size_t));
      return 0;
    };
    b.preference_destroy = [](void* preference) -> int {
      delete static_cast<size_t*>(preference);
      return 0;
    };
    b.heuristic = [](void*, void*, void*, void*, void*, void*, void*, int,
                     lt::backend::cuda::BlasLtHeuristic* results, int* returned) -> int {
      get().heuristics.fetch_add(1);
      *returned = get().refuse_products.load() ? 0 : 1;
      results[0] = {};
      results[0].workspace_bytes = 1024;
      return 0;
    };
    b.matmul = [](void*, void* desc, const void* alpha, const void* a, void* a_layout,
                  const void* b, void* b_layout, const void* beta, const void* c, void* c_layout,
                  void* d, void* d_layout, const void*, void* workspace, size_t workspace_bytes,
                  void*) -> int {
      return get().matmul(
          *static_cast<MatmulDesc*>(desc), alpha, a, *static_cast<MatrixLayout*>(a_layout), b,
          *static_cast<MatrixLayout*>(b_layout), beta, c, *static_cast<MatrixLayout*>(c_layout), d,
          *static_cast<MatrixLayout*>(d_layout), workspace, workspace_bytes);
    };
    return b;
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
    d.event_synchronize = [](CuEvent e) -> CuResult {
      Gpu& gpu = get();
      std::unique_lock lock(gpu.mutex_);
      gpu.idle_.wait(lock, [&] { return static_cast<Event*>(e)->done || gpu.error_ != 0; });
      return gpu.error_;  // stays, as a GPU's does
    };
    d.event_destroy = [](CuEvent e) -> CuResult {
      delete static_cast<Event*>(e);
      return 0;
    };
    d.mem_alloc_async = [](CuDevicePtr* p, size_t bytes, CuStream) -> CuResult {
      return get().allocate(p, bytes);
    };
    d.mem_free_async = [](CuDevicePtr p, CuStream) -> CuResult { return get().free_async(p); };
    d.default_mem_pool = [](CuMemPool* pool, CuDevice) -> CuResult { return *pool = &get(), 0; };
    d.mem_pool_set_attribute = [](CuMemPool pool, int, void*) -> CuResult {
      return pool == &get() ? 0 : kInvalidValue;
    };
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
      const std::string path = get().host_library(static_cast<const char*>(image));
      void* library = path.empty() ? nullptr : dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
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

  Gpu() : worker_([this] { work(); }) {
    worker_.detach();
    char pattern[] = "/tmp/lt-fake-cuda-XXXXXX";
    dir_ = mkdtemp(pattern);
    std::atexit([] { std::filesystem::remove_all(get().dir_); });
  }

  // The shared library built from an image's host source (once per source in a process), or
  // empty when it does not compile (its log is a fault).
  std::string host_library(const std::string& source) {
    std::lock_guard lock(build_mutex_);
    const std::string stem = dir_ + "/program" + std::to_string(std::hash<std::string>{}(source));
    if (std::filesystem::exists(stem + ".so")) return stem + ".so";
    std::ofstream(stem + ".cpp") << source;
    const std::string command = "c++ -std=c++20 -O1 -w -shared -fPIC -pthread -fwrapv " +
                                std::string("-ffp-contract=off -o ") + stem + ".so " + stem +
                                ".cpp > " + stem + ".log 2>&1";
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(stem + ".log");
      std::lock_guard faults(mutex_);
      faults_.push_back("a program did not compile on the host:\n" +
                        std::string(std::istreambuf_iterator<char>(log), {}));
      return "";
    }
    return stem + ".so";
  }

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

  // D = alpha A B + beta C, column-major, in stream order; the operands must be live device
  // memory of the layouts' sizes, and D must be C (the engine's use).
  int matmul(const MatmulDesc& desc, const void* alpha, const void* a, const MatrixLayout& la,
             const void* b, const MatrixLayout& lb, const void* beta, const void* c,
             const MatrixLayout& lc, void* d, const MatrixLayout& ld, void* workspace,
             size_t workspace_bytes) {
    if (la.cols != lb.rows || la.rows != lc.rows || lb.cols != lc.cols || c != d ||
        la.batches != lb.batches || la.batches != lc.batches || lc.type != ld.type) {
      return 7;
    }
    const bool doubles = desc.scale == 1;
    const double scale_a =
        doubles ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
    const double scale_c =
        doubles ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
    std::lock_guard lock(mutex_);
    products.fetch_add(1);
    enqueue_locked([=, this] {
      const auto bytes = [](const MatrixLayout& l) {
        const size_t element = l.type == 0 ? 4 : l.type == 1 ? 8 : 2;
        return element * static_cast<size_t>((l.batches - 1) * l.stride +
                                             static_cast<int64_t>(l.cols - 1) * l.ld +
                                             static_cast<int64_t>(l.rows));
      };
      const auto address = [](const void* p) { return reinterpret_cast<uintptr_t>(p); };
      if (!live(address(a), bytes(la)) || !live(address(b), bytes(lb)) ||
          !live(address(d), bytes(lc)) ||
          (workspace_bytes > 0 && !live(address(workspace), workspace_bytes))) {
        return fault("a product over memory that is not allocated");
      }
      for (int32_t batch = 0; batch < la.batches; ++batch) {
        for (uint64_t j = 0; j < lc.cols; ++j) {
          for (uint64_t i = 0; i < lc.rows; ++i) {
            double sum = 0;  // in the compute type's precision
            for (uint64_t p = 0; p < la.cols; ++p) {
              const double x = load_element(a, la.type, batch * la.stride + p * la.ld + i);
              const double y = load_element(b, lb.type, batch * lb.stride + j * lb.ld + p);
              sum = doubles ? sum + x * y : static_cast<float>(sum + static_cast<float>(x * y));
            }
            const int64_t at = batch * lc.stride + static_cast<int64_t>(j) * lc.ld + i;
            const double before = scale_c == 0 ? 0 : load_element(c, lc.type, at);
            store_element(d, ld.type, at, scale_a * sum + scale_c * before);
          }
        }
      }
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
    return error_;  // stays, as a GPU's does
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
  std::mutex build_mutex_;
  std::string dir_;
  std::thread worker_;
};

}  // namespace fake_cuda
