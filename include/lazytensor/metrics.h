#pragma once
#include <cstdint>
#include <string>
#include <vector>

// One process-wide, thread-safe registry of counters and timers, in the spirit of torch-xla's
// metrics report. Names used by the engine:
//   counters: MarkStep, CachedCompile, UncachedCompile, TransferToDeviceSync,
//             TransferToDeviceAsync, TransferFromDevice, DeviceDataCacheHit, DeviceDataCacheMiss,
//             ExecuteComputation, KernelLaunch, KernelCompile, KernelDiskCacheHit,
//             DeviceAllocation, DeviceAllocationReused (a freed block of 1 MiB or more
//             served again), DonatedBuffer, TracedOps, RowGroupLaunch (launches run
//             together row block by row block, see lt::set_row_groups), SizeBind (a
//             compiled graph bound to new sizes, see lt::set_symbolic_sizes)
//   timers:   TraceTime, CompileTime, BindTime, ExecuteTime, TransferToDeviceTime,
//             HostWaitTime, MatMulTime (the GEMM library calls of matmul)
namespace lt::metrics {

// 0 for a counter never touched.
int64_t counter_value(const std::string& name);

struct TimerStats {
  int64_t count = 0;
  double total_seconds = 0;
  double min_seconds = 0;
  double max_seconds = 0;
  double median_seconds = 0;  // over the most recent samples (a bounded window)
};
// All zeros for a timer never touched.
TimerStats timer_stats(const std::string& name);

std::vector<std::string> counter_names();
std::vector<std::string> timer_names();

// Sets every counter and timer back to zero.
void reset();
// A readable table of every counter and timer touched so far.
std::string report();
// The same as a JSON object: {"counters": {name: value}, "timers": {name: {...}}}.
std::string report_json();

// Recording, for the engine and for users who want their own counters.
void increment(const std::string& name, int64_t delta = 1);
void record_time(const std::string& name, double seconds);

}  // namespace lt::metrics
