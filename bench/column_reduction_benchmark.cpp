// Sums over the leading dim (a bias's gradient: [rows, columns] -> [columns]) on BERT's shapes,
// beside the sum over the last dim of the same tensor, which streams it row by row: the ratio
// says how close the column path comes to one pass over memory. Each timed call is trace +
// mark_step + wait; median of 9 after 3 warm-ups, native kernels.
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "engine_timing.h"

using lt::bench::cpu_model;
using lt::bench::median_ms;

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
