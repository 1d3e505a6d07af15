#pragma once
// Handles into the metrics registry for the engine's hot paths: look a metric up once
// (`static Counter& c = counter("MarkStep");`) and update it without a map lookup.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "lazytensor/metrics.h"

namespace lt::metrics {

class Counter {
 public:
  void add(int64_t delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }
  void reset() { value_.store(0, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Timer {
 public:
  void record(double seconds);
  TimerStats stats() const;
  void reset();

 private:
  mutable std::mutex mu_;
  int64_t count_ = 0;
  double total_ = 0, min_ = 0, max_ = 0;
  std::vector<double> window_;
  size_t next_ = 0;
};

// Both live until the process exits; the references stay valid.
Counter& counter(const std::string& name);
Timer& timer(const std::string& name);

// Records the time from construction to destruction.
class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& timer) : timer_(timer), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    timer_.record(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  Timer& timer_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace lt::metrics
