// The kernels' transcendental functions on BERT-base's widest activation ([1024, 3072], the
// feed-forward's): exp, log, pow, erf, tanh, GELU in both forms and GELU's backward pass (its
// derivative times the incoming gradient), beside a multiply by a scalar, which costs one pass over
// memory and no arithmetic to speak of. Each timed call is trace + mark_step + wait; median of 9
// after 3 warm-ups, native kernels. Run it before and after a change to the kernels' math: the
// ratios to the multiply say how far each op is from memory speed.
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine_timing.h"

using lt::bench::cpu_model;
using lt::bench::median_ms;

int main() {
  const lt::Tensor x = lt::randn({1024, 3072}, 1);
  const lt::Tensor incoming = lt::randn({1024, 3072}, 2);
  const lt::Tensor positive = x.abs();
  lt::mark_step();
  lt::wait_device_ops();
  const double elements = static_cast<double>(x.numel());
  auto gelu_backward = [&] {
    lt::Tensor leaf = x.detach();
    leaf.requires_grad_();
    return lt::grad({lt::gelu(leaf)}, {leaf}, {incoming})[0];
  };
  const std::vector<std::pair<std::string, std::function<lt::Tensor()>>> ops = {
      {"x * 2", [&] { return x * 2.0; }},
      {"exp", [&] { return x.exp(); }},
      {"log", [&] { return positive.log(); }},
      {"x ** 2", [&] { return x.pow(2.0); }},
      {"x ** 2.5", [&] { return positive.pow(2.5); }},
      {"erf", [&] { return x.erf(); }},
      {"tanh", [&] { return x.tanh(); }},
      {"gelu", [&] { return lt::gelu(x); }},
      {"gelu (tanh form)", [&] { return lt::gelu(x, lt::GeluApproximation::tanh); }},
      {"gelu backward", gelu_backward},
  };
  std::printf("CPU: %s; [1024, 3072] f32, median of 9 calls\n\n", cpu_model().c_str());
  std::printf("| op | ms | ns an element | / multiply |\n|---|---:|---:|---:|\n");
  double multiply = 0;
  for (const auto& [name, op] : ops) {
    const double ms = median_ms(op);
    if (multiply == 0) multiply = ms;
    std::printf("| %s | %.3f | %.3f | %.2f |\n", name.c_str(), ms, ms * 1e6 / elements,
                ms / multiply);
  }
  return 0;
}
