#pragma once
#include <string>

// A timeline of what the host and the device did, written as Chrome trace-event JSON (open it
// in Perfetto or chrome://tracing). The engine records mark_step, compiles, transfers
// (synchronous ones marked), host waits and executions on their threads; users add their own
// spans with Scope. Recording costs nothing while the profiler is off.
namespace lt::profiler {

void start();  // clears earlier events
void stop();
bool enabled();
// Writes every event recorded since start(); throws lt::Error if the file cannot be written.
void write_chrome_trace(const std::string& path);
// Names the calling thread in the timeline.
void set_thread_name(const std::string& name);

class Scope {
 public:
  Scope(const char* name, const char* category);
  // `detail` (which must outlive the scope) is written as the event's args.detail: what a
  // launch computed, say. Read only while the profiler is on.
  Scope(const char* name, const char* category, const std::string& detail);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* category_;
  const std::string* detail_ = nullptr;
  long long start_ns_;
};

}  // namespace lt::profiler
