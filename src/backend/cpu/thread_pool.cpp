#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <utility>

#if LT_POOL_OPENMP
#include <omp.h>
#endif

namespace lt::backend::cpu {

ThreadPool::ThreadPool(int capacity) : capacity_(std::max(1, capacity)), workers_(capacity_) {
#if !LT_POOL_OPENMP
  for (int w = 1; w < capacity_; ++w) threads_.emplace_back([this, w] { loop(w); });
#endif
}

void ThreadPool::set_workers(int workers) {
  workers = std::clamp(workers, 1, capacity_);
  if (workers == workers_) return;
  workers_ = workers;
#if LT_POOL_OPENMP
  omp_set_num_threads(workers_);
#endif
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::call(const std::function<void(int)>& fn, int worker) {
  try {
    fn(worker);
  } catch (...) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (workers_ == 1) {
    fn(0);
    return;
  }
#if LT_POOL_OPENMP
#pragma omp parallel num_threads(workers_)
  call(fn, omp_get_thread_num());
#else
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    running_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  call(fn, 0);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return running_ == 0; });
    fn_ = nullptr;
  }
#endif
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::loop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<void(int)>* fn = fn_;
    const bool works = worker < workers_;
    lock.unlock();
    if (works) call(*fn, worker);
    lock.lock();
    if (--running_ == 0) done_cv_.notify_one();
  }
}

}  // namespace lt::backend::cpu
