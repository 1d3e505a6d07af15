#include "lazytensor/metrics.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "metrics/metrics_registry.h"

namespace lt::metrics {

namespace {

constexpr size_t kTimerWindow = 1024;

struct Registry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<Counter>> counters;
  std::map<std::string, std::unique_ptr<Timer>> timers;
};

// The engine's metrics exist from the start, so reports list them even at zero.
constexpr const char* kEngineCounters[] = {"MarkStep",
                                           "CachedCompile",
                                           "UncachedCompile",
                                           "TransferToDeviceSync",
                                           "TransferToDeviceAsync",
                                           "TransferFromDevice",
                                           "DeviceDataCacheHit",
                                           "DeviceDataCacheMiss",
                                           "ExecuteComputation",
                                           "KernelLaunch",
                                           "KernelCompile",
                                           "KernelDiskCacheHit",
                                           "DeviceAllocation",
                                           "DonatedBuffer",
                                           "TracedOps"};
constexpr const char* kEngineTimers[] = {"TraceTime", "CompileTime", "ExecuteTime",
                                         "TransferToDeviceTime", "HostWaitTime"};

Registry& registry() {
  static Registry* r = [] {
    auto* registry = new Registry();  // never destroyed: worker threads may record at exit
    for (const char* name : kEngineCounters) registry->counters[name] = std::make_unique<Counter>();
    for (const char* name : kEngineTimers) registry->timers[name] = std::make_unique<Timer>();
    return registry;
  }();
  return *r;
}

}  // namespace

void Timer::record(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (count_ == 0 || seconds < min_) min_ = seconds;
  if (count_ == 0 || seconds > max_) max_ = seconds;
  ++count_;
  total_ += seconds;
  if (window_.size() < kTimerWindow) {
    window_.push_back(seconds);
  } else {
    window_[next_] = seconds;
  }
  next_ = (next_ + 1) % kTimerWindow;
}

TimerStats Timer::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  TimerStats s;
  s.count = count_;
  s.total_seconds = total_;
  s.min_seconds = min_;
  s.max_seconds = max_;
  if (!window_.empty()) {
    std::vector<double> sorted = window_;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    s.median_seconds = sorted[sorted.size() / 2];
  }
  return s;
}

void Timer::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  count_ = 0;
  total_ = min_ = max_ = 0;
  window_.clear();
  next_ = 0;
}

Counter& counter(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& slot = r.counters[name];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Timer& timer(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& slot = r.timers[name];
  if (!slot) slot = std::make_unique<Timer>();
  return *slot;
}

int64_t counter_value(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.counters.find(name);
  return it == r.counters.end() ? 0 : it->second->value();
}

TimerStats timer_stats(const std::string& name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.timers.find(name);
  return it == r.timers.end() ? TimerStats{} : it->second->stats();
}

std::vector<std::string> counter_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (auto& [name, c] : r.counters) names.push_back(name);
  return names;
}

std::vector<std::string> timer_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (auto& [name, t] : r.timers) names.push_back(name);
  return names;
}

void reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [name, c] : r.counters) c->reset();
  for (auto& [name, t] : r.timers) t->reset();
}

void increment(const std::string& name, int64_t delta) {
  counter(name).add(delta);
}

void record_time(const std::string& name, double seconds) {
  timer(name).record(seconds);
}

std::string report() {
  std::string out = "Counters\n";
  char line[256];
  for (const auto& name : counter_names()) {
    std::snprintf(line, sizeof line, "  %-24s %14lld\n", name.c_str(),
                  static_cast<long long>(counter_value(name)));
    out += line;
  }
  out += "Timers                        count     total(s)    median(ms)       max(ms)\n";
  for (const auto& name : timer_names()) {
    TimerStats s = timer_stats(name);
    std::snprintf(line, sizeof line, "  %-24s %9lld %12.6f %13.4f %13.4f\n", name.c_str(),
                  static_cast<long long>(s.count), s.total_seconds, s.median_seconds * 1e3,
                  s.max_seconds * 1e3);
    out += line;
  }
  return out;
}

std::string report_json() {
  nlohmann::json j;
  j["counters"] = nlohmann::json::object();
  j["timers"] = nlohmann::json::object();
  for (const auto& name : counter_names()) j["counters"][name] = counter_value(name);
  for (const auto& name : timer_names()) {
    TimerStats s = timer_stats(name);
    j["timers"][name] = {{"count", s.count},
                         {"total_seconds", s.total_seconds},
                         {"min_seconds", s.min_seconds},
                         {"max_seconds", s.max_seconds},
                         {"median_seconds", s.median_seconds}};
  }
  return j.dump(2);
}

}  // namespace lt::metrics
