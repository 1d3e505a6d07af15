// Sums over the leading dim (a bias's gradient: [rows, columns] -> [columns]) on BERT's shapes,
// beside the sum over the last dim of the same tensor, which streams it row by row: the ratio
// says how close the column path comes to one pass over memory. Each timed call is trace +
// mark_step + wait; median of 9 after 3 warm-ups, native kernels.
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

double median_ms(const std::function<lt::Tensor()>& op) {
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

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

}  // namespace

int main() {
  // Bias gradients of batch 8 x sequence 128 (and 64 x 128): attention and output projections,
  // the feed-forward's first layer, the MLM decoder's vocabulary.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1024, 384}, {1024, 768}, {1024, 3072}, {8192, 768}, {1024, 30522}};
  std::printf("CPU: %s; ms per call, median of 9\n\n", cpu_model().c_str());
  std::printf(
      "| [rows, columns] | sum over rows (ms) | GB/s | sum over columns (ms) | rows / columns |\n"
      "|---|---:|---:|---:|---:|\n");
  uint64_t seed = 1;
  for (const auto& [rows, cols] : shapes) {
    const lt::Tensor x = lt::randn({rows, cols}, seed++);
    lt::mark_step();
    lt::wait_device_ops();
    const double down = median_ms([&] { return x.sum({0}); });
    const double across = median_ms([&] { return x.sum({1}); });
    const double gbps = static_cast<double>(rows * cols * 4) / (down * 1e6);
    std::printf("| [%lld, %lld] | %.3f | %.1f | %.3f | %.2f |\n", static_cast<long long>(rows),
                static_cast<long long>(cols), down, gbps, across, down / across);
  }
  return 0;
}
