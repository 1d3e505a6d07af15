#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lt::backend::cpu {

// Runs one function on every worker at once; the calling thread is worker 0. Kernels split
// their work dynamically between the workers (see cpu_executable.cpp).
class ThreadPool {
 public:
  explicit ThreadPool(int num_workers);
  ~ThreadPool();

  int size() const { return static_cast<int>(threads_.size()) + 1; }
  // Calls fn(worker) for worker in [0, size()) and returns when all have returned.
  // Called from one thread at a time (the stream's worker).
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int worker);

  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lt::backend::cpu
