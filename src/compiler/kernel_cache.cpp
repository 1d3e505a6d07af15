#include <cstdio>
#include <list>
#include <mutex>
#include <unordered_map>

#include "compiler/compiled_kernel.h"
#include "lazytensor/error.h"
#include "runtime/config.h"

namespace lt::compiler {

namespace {

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
  void insert(const std::string& key, std::shared_ptr<const CompiledKernel> kernel) {
    std::lock_guard<std::mutex> lock(mu_);
    if (map_.count(key)) return;
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(std::move(kernel), lru_.begin()));
    while (map_.size() > std::max<size_t>(1, runtime::config().kernel_cache_size)) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
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

}  // namespace

std::vector<std::shared_ptr<const CompiledKernel>> get_kernels(
    const std::vector<const KernelProgram*>& programs) {
  std::string method = runtime::config().kernel_compiler();
  std::vector<std::shared_ptr<const CompiledKernel>> result(programs.size());
  std::vector<std::string> keys(programs.size());
  std::vector<size_t> missing;
  std::vector<const KernelProgram*> to_compile;
  for (size_t i = 0; i < programs.size(); ++i) {
    keys[i] = method + ":" + programs[i]->key();
    result[i] = cache().find(keys[i]);
    if (!result[i]) {
      // A program may repeat within one batch: compile it once.
      bool seen = false;
      for (size_t m : missing) seen = seen || keys[m] == keys[i];
      if (!seen) to_compile.push_back(programs[i]);
      missing.push_back(i);
    }
  }
  if (!to_compile.empty()) {
    std::vector<std::shared_ptr<CompiledKernel>> compiled;
    if (method == "native") {
      try {
        compiled = compile_native(to_compile);
      } catch (const Error& e) {
        // A machine without a working compiler still runs, slower; say so once.
        static bool warned = false;
        if (!warned) {
          std::fprintf(stderr,
                       "lazytensor: native kernels unavailable, using the interpreter: %s\n",
                       e.what());
          warned = true;
        }
        runtime::config().set_kernel_compiler("interpreter");
        return get_kernels(programs);
      }
    } else {
      for (const KernelProgram* program : to_compile) {
        compiled.push_back(make_interpreted_kernel(*program));
      }
    }
    std::unordered_map<std::string, std::shared_ptr<const CompiledKernel>> fresh;
    for (size_t c = 0; c < to_compile.size(); ++c) {
      std::string key = method + ":" + to_compile[c]->key();
      cache().insert(key, compiled[c]);
      fresh.emplace(std::move(key), compiled[c]);
    }
    for (size_t i : missing) result[i] = fresh.at(keys[i]);
  }
  return result;
}

size_t kernel_cache_size() {
  return cache().size();
}

}  // namespace lt::compiler
