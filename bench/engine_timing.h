// What the engine's small benchmarks share: the median time of an op run through the engine
// (trace + mark_step + wait), and the CPU's name for the table's caption.
#pragma once

#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace lt::bench {

// Milliseconds of one call of `op` (trace + mark_step + wait), median of 9 after 3 warm-ups;
// the native kernels are waited for after the warm-ups, so the timed calls run them.
inline double median_ms(const std::function<lt::Tensor()>& op) {
  std::vector<double> times;
  for (int i = 0; i < 12; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const lt::Tensor y = op();
    lt::mark_step();
    lt::wait_device_ops();
    const auto end = std::chrono::steady_clock::now();
    if (i == 2) lt::wait_kernel_compiles();
    if (i >= 3) times.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace lt::bench
