#include "backend/cpu/thread_pool.h"

namespace lt::backend::cpu {

ThreadPool::ThreadPool(int num_workers) {
  for (int w = 1; w < num_workers; ++w) threads_.emplace_back([this, w] { loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run(const std::function<void(int)>& fn) {
  if (threads_.empty()) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    running_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  start_cv_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return running_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::loop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<void(int)>* fn = fn_;
    lock.unlock();
    (*fn)(worker);
    lock.lock();
    if (--running_ == 0) done_cv_.notify_one();
  }
}

}  // namespace lt::backend::cpu
