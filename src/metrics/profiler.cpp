#include "lazytensor/profiler.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "lazytensor/error.h"

namespace lt::profiler {

namespace {

struct Event {
  const char* name;
  const char* category;
  long long start_ns, duration_ns;
  int thread;
  std::string detail;
};

struct Profiler {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::vector<Event> events;
  std::map<std::thread::id, int> thread_ids;
  std::map<int, std::string> thread_names;

  int thread_id() {  // caller holds mu
    auto [it, fresh] = thread_ids.emplace(std::this_thread::get_id(), thread_ids.size() + 1);
    return it->second;
  }
};

Profiler& profiler() {
  static Profiler* p = new Profiler();
  return *p;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void start() {
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  p.events.clear();
  p.on = true;
}

void stop() {
  profiler().on = false;
}

bool enabled() {
  return profiler().on.load(std::memory_order_relaxed);
}

void set_thread_name(const std::string& name) {
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  p.thread_names[p.thread_id()] = name;
}

Scope::Scope(const char* name, const char* category)
    : name_(name), category_(category), start_ns_(enabled() ? now_ns() : -1) {}

Scope::Scope(const char* name, const char* category, const std::string& detail)
    : name_(name), category_(category), detail_(&detail), start_ns_(enabled() ? now_ns() : -1) {}

Scope::~Scope() {
  if (start_ns_ < 0) return;
  const long long end = now_ns();
  Profiler& p = profiler();
  std::lock_guard<std::mutex> lock(p.mu);
  p.events.push_back({name_, category_, start_ns_, end - start_ns_, p.thread_id(),
                      detail_ ? *detail_ : std::string()});
}

void write_chrome_trace(const std::string& path) {
  Profiler& p = profiler();
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> lock(p.mu);
    for (const auto& [tid, name] : p.thread_names) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", tid},
                        {"args", {{"name", name}}}});
    }
    for (const Event& e : p.events) {
      nlohmann::json event = {{"name", e.name},
                              {"cat", e.category},
                              {"ph", "X"},
                              {"pid", 1},
                              {"tid", e.thread},
                              {"ts", e.start_ns / 1000.0},
                              {"dur", e.duration_ns / 1000.0}};
      if (!e.detail.empty()) event["args"] = {{"detail", e.detail}};
      events.push_back(std::move(event));
    }
  }
  std::ofstream out(path);
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump();
  if (!out) throw Error("write_chrome_trace: cannot write '" + path + "'");
}

}  // namespace lt::profiler
