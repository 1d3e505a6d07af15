#pragma once
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace lt::backend::cpu {

// One in-order queue of device work served by a worker thread. The host enqueues and goes
// on tracing; a bound on queued tasks keeps it from running arbitrarily far ahead.
class Stream {
 public:
  explicit Stream(size_t max_queued);
  ~Stream();

  // Blocks (counted in HostWaitTime) while max_queued tasks are waiting.
  void enqueue(std::function<void()> task);
  // Waits until every task enqueued so far has run.
  void synchronize();
  // A task reports a failure here; synchronize's caller can take the first one.
  void record_failure(const std::string& message);
  std::string take_failure();

 private:
  void loop();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable work_cv_;   // worker: something to do
  std::condition_variable space_cv_;  // host: room in the queue / progress
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  std::string failure_;
  std::thread worker_;
};

}  // namespace lt::backend::cpu
