#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lt::backend::cpu {

// Runs one function on every worker at once; the calling thread is worker 0. Kernels split
// their work dynamically between the workers (see cpu_executable.cpp), so a worker that does
// not come (OpenMP may give fewer threads than asked) leaves its share to the others.
//
// The workers are OpenMP's where the build has it (backend.cmake says why), else the pool's
// own threads.
class ThreadPool {
 public:
  // `capacity` workers at most; all of them work until set_workers says otherwise.
  explicit ThreadPool(int capacity);
  ~ThreadPool();

  int size() const { return workers_; }
  int capacity() const { return capacity_; }
  // How many workers the next runs use, clamped to [1, capacity()] (lt::set_num_threads);
  // with OpenMP also the calling thread's OpenMP team size, which the matrix library's products
  // use. Called from the thread that calls run().
  void set_workers(int workers);
  // Calls fn(worker) for worker in [0, size()) and returns when all have returned; an
  // exception from any of them is rethrown then. Called from one thread at a time (the
  // stream's worker).
  void run(const std::function<void(int)>& fn);

 private:
  void loop(int worker);
  // Calls fn(worker), keeping the first exception of a run for run() to rethrow.
  void call(const std::function<void(int)>& fn, int worker);

  const int capacity_;
  int workers_;
  std::mutex error_mu_;
  std::exception_ptr error_;

  // The pool's own workers 1 .. capacity-1 (builds without OpenMP); those at or above size()
  // sit a run out.
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lt::backend::cpu
