// Softmax, layer norm and cross-entropy on BERT-sized rows, with row groups off and on
// (lt::set_row_groups), one after the other in one run: what running their launches row block
// by row block saves. Each timed call is trace + mark_step + wait; median of 9 after 3 warm-ups,
// native kernels.
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine_timing.h"

using lt::bench::cpu_model;
using lt::bench::median_ms;

int main() {
  const lt::Tensor scores = lt::randn({8 * 12 * 128, 128}, 1);  // attention: batch 8, 12 heads
  const lt::Tensor hidden = lt::randn({8 * 128, 768}, 2);
  const lt::Tensor weight = lt::ones({768}), bias = lt::zeros({768});
  const lt::Tensor logits = lt::randn({8 * 128, 30522}, 3);  // the MLM head's vocabulary
  std::vector<int64_t> ids(8 * 128);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 37 % 30522);
  const lt::Tensor targets = lt::from_vector(ids, {static_cast<int64_t>(ids.size())});
  lt::mark_step();
  lt::wait_device_ops();
  const std::vector<std::pair<std::string, std::function<lt::Tensor()>>> ops = {
      {"softmax [12288, 128]", [&] { return lt::softmax(scores, -1); }},
      {"layer_norm [1024, 768]",
       [&] { return lt::layer_norm(hidden, {768}, weight, bias, 1e-12); }},
      {"cross_entropy [1024, 30522]", [&] { return lt::cross_entropy(logits, targets); }},
  };
  std::printf("CPU: %s; ms per call, median of 9\n\n", cpu_model().c_str());
  std::printf("| op | row groups off | row groups on | off / on |\n|---|---:|---:|---:|\n");
  for (const auto& [name, op] : ops) {
    lt::set_row_groups(false);
    const double off = median_ms(op);
    lt::set_row_groups(true);
    const double on = median_ms(op);
    std::printf("| %s | %.2f | %.2f | %.2f |\n", name.c_str(), off, on, off / on);
  }
  return 0;
}
