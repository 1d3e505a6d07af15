#pragma once
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

#include "lazytensor/runtime.h"

namespace lt::runtime {

// The engine's settings, read from the environment on first use (see runtime.h).
struct Config {
  std::atomic<ScalarPolicy> scalar_policy{ScalarPolicy::argument};
  std::atomic<bool> special_scalars{true};
  std::atomic<size_t> compile_cache_size{256};
  std::atomic<size_t> data_cache_size{128};
  std::atomic<size_t> kernel_cache_size{4096};
  std::atomic<size_t> kernel_cache_bytes{size_t{256} << 20};
  std::atomic<bool> debug{false};
  std::atomic<size_t> device_memory_limit{0};  // bytes; 0: all of the machine's memory
  std::atomic<int> num_threads{0};             // 0: one per core
  std::atomic<bool> tiered_compilation{true};  // native code compiles in the background
  std::atomic<size_t> max_kernel_ops{512};     // a fused kernel's longest program
  std::atomic<bool> row_groups{true};          // row-blocked runs of softmax-like launches
  std::atomic<bool> symbolic_sizes{true};      // one graph for every sequence length
  std::atomic<size_t> graph_warn_nodes{1'000'000};
  std::atomic<size_t> auto_cut_nodes{4'000'000};  // 0: never cut automatically
  // The language hints are written in (lt::set_front_end): C++ names or Python's.
  std::atomic<bool> python_front_end{false};

  std::string kernel_compiler() const;
  void set_kernel_compiler(const std::string& name);
  std::string kernel_cache_dir() const;
  void set_kernel_cache_dir(const std::string& path);

 private:
  friend Config& config();

  mutable std::mutex mu_;
  std::string kernel_compiler_ = "native";
  std::string kernel_cache_dir_;
};

Config& config();

// A name as the caller writes it: `cpp` from C++, `python` from the Python package.
inline const char* in_callers_words(const char* cpp, const char* python) {
  return config().python_front_end.load(std::memory_order_relaxed) ? python : cpp;
}

}  // namespace lt::runtime
