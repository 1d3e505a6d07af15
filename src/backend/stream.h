#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/failure.h"
#include "lazytensor/runtime.h"

namespace lt::backend {

// One in-order queue of device work served by a worker thread (each backend's stream: the CPU
// runs its kernels there, a device backend drives its own queue from it). The host enqueues and
// goes on tracing; a bound on queued tasks keeps it from running arbitrarily far ahead.
class Stream {
 public:
  explicit Stream(size_t max_queued);
  ~Stream();

  // Blocks (counted in HostWaitTime) while max_queued tasks are waiting.
  void enqueue(std::function<void()> task);
  // Waits until every task enqueued so far has run.
  void synchronize();
  // ... and raises the first failure no call has raised yet (a backend's synchronize()).
  void synchronize_and_raise();
  // A marker task that records when the stream reaches it.
  DeviceEvent record_event();
  // A task reports a failure here; synchronize's caller can take the first one. When the host
  // raises a failure (reading a value of a failed step), those of that step and earlier ones
  // are dismissed: the user has heard that the run hit a failed step, once.
  void record_failure(const Failure& failure);
  // The recorded failure if its step is before `before_step` (any step by default).
  Failure take_failure(int64_t before_step = INT64_MAX);
  void dismiss_failure(const Failure& failure);

 private:
  void loop();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable work_cv_;   // worker: something to do
  std::condition_variable space_cv_;  // host: room in the queue / progress
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  Failure failure_;
  std::thread worker_;
};

}  // namespace lt::backend
