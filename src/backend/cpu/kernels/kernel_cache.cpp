// The in-memory kernel cache and tiered compilation: a native kernel is handed out at once in
// its interpreted form and switches to native code when a background compile finishes.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cpu {

namespace {

// Programs of about this many instructions go to one compiler process: fewer processes
// amortize the compiler's start-up, more use more cores.
constexpr size_t kInstrsPerBatch = 2048;

class TieredKernel final : public CompiledKernel {
 public:
  explicit TieredKernel(const KernelProgram& program)
      : program_(program), interpreted_(make_interpreted_kernel(program)) {}

  void run(const void* const* inputs, void* const* outputs, const double* scalars, int64_t start,
           int64_t n) const override {
    resolve().run(inputs, outputs, scalars, start, n);
  }
  const char* method() const override { return resolve().method(); }
  const CompiledKernel& resolve() const override {
    const CompiledKernel* native = native_.load(std::memory_order_acquire);
    return native ? *native : *interpreted_;
  }

  const KernelProgram& program() const { return program_; }
  void set_native(std::shared_ptr<CompiledKernel> native) {
    native_owner_ = std::move(native);  // published by the release store below
    native_.store(native_owner_.get(), std::memory_order_release);
  }

 private:
  KernelProgram program_;
  std::shared_ptr<CompiledKernel> interpreted_;
  std::shared_ptr<CompiledKernel> native_owner_;
  std::atomic<const CompiledKernel*> native_{nullptr};
};

// The compiler command that failed, if one did: kernels stay interpreted while it is the one
// asked for.
std::mutex& broken_mu() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}
std::string& broken_compiler() {
  static std::string* command = new std::string();
  return *command;
}

// Kernels waiting for one compiler process.
struct CompileBatch {
  std::vector<std::shared_ptr<TieredKernel>> kernels;
  KernelSettings options;
};

// Worker threads that run the system compiler, one process per batch, as many at once as
// there are cores.
class CompileService {
 public:
  CompileService() {
    const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned t = 0; t < threads; ++t) std::thread([this] { serve(); }).detach();
  }
  size_t threads() const { return std::max(1u, std::thread::hardware_concurrency()); }

  void submit(CompileBatch batch) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(batch));
      ++unfinished_;
    }
    cv_.notify_one();
  }

  void wait_idle() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return unfinished_ == 0; });
  }

 private:
  void serve() {
    profiler::set_thread_name("kernel compiler");
    for (;;) {
      CompileBatch batch;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      compile(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --unfinished_;
      }
      idle_.notify_all();
    }
  }

  static void compile(const CompileBatch& batch) {
    static metrics::Timer& time = metrics::timer("BackgroundCompileTime");
    metrics::ScopedTimer timer(time);
    profiler::Scope span("compile native kernels", "compile");
    std::vector<const KernelProgram*> programs;
    for (const auto& kernel : batch.kernels) programs.push_back(&kernel->program());
    std::string failure;
    try {
      std::vector<std::shared_ptr<CompiledKernel>> native = compile_native(programs, batch.options);
      for (size_t k = 0; k < native.size(); ++k) batch.kernels[k]->set_native(std::move(native[k]));
      return;
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown error";
    }
    // A machine without a working compiler still runs, on the interpreter: say so once, and
    // start no more processes of that compiler, which would fail the same way.
    metrics::counter("NativeCompileFailure").add();
    std::lock_guard<std::mutex> lock(broken_mu());
    if (broken_compiler() == batch.options.compiler) return;
    broken_compiler() = batch.options.compiler;
    std::fprintf(stderr, "lazytensor: native kernels unavailable, the interpreter runs them: %s\n",
                 failure.c_str());
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<CompileBatch> queue_;
  size_t unfinished_ = 0;
};

CompileService& service() {
  static CompileService* s = new CompileService();  // never destroyed: its threads run on
  return *s;
}

// An LRU map from "method + program key" to the compiled kernel. Executables hold their
// kernels, so evicting one here never unloads code that is still in use.
class KernelCache {
 public:
  std::shared_ptr<const CompiledKernel> find(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }
  void insert(const std::string& key, std::shared_ptr<const CompiledKernel> kernel, size_t bound) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key)) return;
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(std::move(kernel), lru_.begin()));
    while (map_.size() > std::max<size_t>(1, bound)) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
  }

 private:
  std::mutex mu_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, std::pair<std::shared_ptr<const CompiledKernel>,
                                            std::list<std::string>::iterator>>
      map_;
};

KernelCache& cache() {
  static KernelCache* c = new KernelCache();
  return *c;
}

// Splits the kernels into batches of about kInstrsPerBatch instructions, at most one per
// compile thread, and submits them.
void submit_native(std::vector<std::shared_ptr<TieredKernel>> kernels,
                   const KernelSettings& options) {
  {
    std::lock_guard<std::mutex> lock(broken_mu());
    if (broken_compiler() == options.compiler) return;
  }
  size_t total = 0;
  for (const auto& kernel : kernels) total += kernel->program().instrs.size();
  const size_t batches = std::clamp<size_t>((total + kInstrsPerBatch - 1) / kInstrsPerBatch, 1,
                                            std::min(service().threads(), kernels.size()));
  std::vector<CompileBatch> out(batches);
  std::vector<size_t> load(batches, 0);
  for (auto& kernel : kernels) {  // each to the lightest batch, in order
    const size_t b = std::min_element(load.begin(), load.end()) - load.begin();
    load[b] += kernel->program().instrs.size();
    out[b].kernels.push_back(std::move(kernel));
  }
  for (CompileBatch& batch : out) {
    batch.options = options;
    service().submit(std::move(batch));
  }
}

}  // namespace

std::vector<std::shared_ptr<const CompiledKernel>> get_kernels(
    const std::vector<const KernelProgram*>& programs, const KernelSettings& options) {
  const std::string method = options.native ? "native:" : "interpreter:";
  std::vector<std::shared_ptr<const CompiledKernel>> result(programs.size());
  std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>> fresh;
  std::vector<std::shared_ptr<TieredKernel>> to_compile;
  for (size_t i = 0; i < programs.size(); ++i) {
    std::string key = method + programs[i]->key();
    if ((result[i] = cache().find(key))) continue;
    auto it = fresh.find(key);  // a program may repeat within one batch: compile it once
    if (it != fresh.end()) {
      result[i] = it->second;
      continue;
    }
    if (options.native) {
      auto kernel = std::make_shared<TieredKernel>(*programs[i]);
      to_compile.push_back(kernel);
      result[i] = kernel;
    } else {
      result[i] = make_interpreted_kernel(*programs[i]);
    }
    cache().insert(key, result[i], options.cache_entries);
    fresh.emplace(std::move(key), result[i]);
  }
  if (!to_compile.empty()) submit_native(std::move(to_compile), options);
  // Not tiered: wait, also for kernels of this graph that an earlier tiered compile started.
  if (options.native && !options.tiered) service().wait_idle();
  return result;
}

size_t kernel_cache_size() {
  return cache().size();
}

void clear_kernel_cache() {
  cache().clear();
}

void wait_background_compiles() {
  service().wait_idle();
}

}  // namespace lt::backend::cpu
