// Softmax, layer norm and cross-entropy on BERT-sized rows, with row groups off and on
// (lt::set_row_groups), one after the other in one run: what running their launches row block
// by row block saves. Each timed call is trace + mark_step + wait; median of 9 after 3 warm-ups,
// native kernels.
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
