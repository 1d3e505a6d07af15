#include "backend/stream.h"

#include "backend/backend.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend {

Stream::Stream(size_t max_queued) : max_queued_(max_queued), worker_([this] { loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void Stream::enqueue(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (queue_.size() >= max_queued_) {
    metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
    profiler::Scope span("host waits for queue space", "wait");
    space_cv_.wait(lock, [&] { return queue_.size() < max_queued_; });
  }
  queue_.push_back(std::move(task));
  ++enqueued_;
  work_cv_.notify_one();
}

void Stream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  if (completed_ >= target) return;
  metrics::ScopedTimer wait(metrics::timer("HostWaitTime"));
  profiler::Scope span("host waits for device", "wait");
  space_cv_.wait(lock, [&] { return completed_ >= target; });
}

void Stream::synchronize_and_raise() {
  synchronize();
  const Failure failure = take_failure();
  if (!failure.empty()) failure.raise("wait_device_ops: ");
}

DeviceEvent Stream::record_event() {
  auto state = std::make_shared<DeviceEvent::State>();
  enqueue([state] { state->complete(); });
  return DeviceEvent(state);
}

void Stream::record_failure(const Failure& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (failure_.empty()) failure_ = failure;
}

Failure Stream::take_failure(int64_t before_step) {
  std::lock_guard<std::mutex> lock(mu_);
  Failure failure;
  if (!failure_.empty() && failure_.step < before_step) std::swap(failure, failure_);
  return failure;
}

void Stream::dismiss_failure(const Failure& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty() && failure_.step <= failure.step) failure_ = Failure();
}

void Stream::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    space_cv_.notify_all();
    lock.unlock();
    task();          // tasks catch their own errors and report them through record_failure
    task = nullptr;  // release captured buffers before reporting completion
    lock.lock();
    ++completed_;
    space_cv_.notify_all();
  }
}

}  // namespace lt::backend
