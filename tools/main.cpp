// The lazytensor command.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "lazytensor/lazytensor.h"

namespace {

// A short tour: trace, mark_step, the compile cache and the metrics report.
int run_demo(int steps) {
  lt::Tensor p = lt::randn({1024, 1024}, 1);
  lt::Tensor g = lt::randn({1024, 1024}, 2).mul_(1e-3);
  lt::Tensor m = lt::zeros({1024, 1024});
  lt::mark_step();
  for (int step = 1; step <= steps; ++step) {
    m.mul_(0.9).add_(g, 0.1);
    p.add_(m, -1e-3 * step);
    lt::mark_step();
  }
  std::printf("p[0] = %.6f after %d steps\n", p.to_vector()[0], steps);
  std::printf("%s", lt::metrics::report().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lazytensor: a lazy-tensor engine"};
  app.require_subcommand(1);
  int demo_steps = 5;
  auto* demo = app.add_subcommand("demo", "trace a few steps and print the metrics report");
  demo->add_option("--steps", demo_steps, "steps to run")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return run_demo(demo_steps);
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "lazytensor: %s\n", e.what());
    return 1;
  }
  return 0;
}
