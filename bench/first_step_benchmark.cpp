// What the first step of a new graph costs, and when native code takes over: long elementwise
// chains (x = x * a + b, repeated) traced into one graph, with a cold kernel cache.
//
//   first_step_benchmark [elements]
//
// For each chain length and compile mode it prints the time mark_step() took on the host, the
// time until the first value could be read, the time until every native kernel was compiled,
// and a later step's time (native code when tiered compilation has caught up).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "lazytensor/lazytensor.h"

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// "repeating": x * a + b over and over, so every cut of the chain is the same program.
// "varied": a pseudo-random mix of ops, so every kernel is a new program to compile.
lt::Tensor chain(const lt::Tensor& x0, int ops, bool varied) {
  lt::Tensor x = x0;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < ops / 2; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    switch (varied ? state >> 62 : 0) {
      case 0:
        x = x.mul(0.999).add(0.001);
        break;
      case 1:
        x = x.sub(0.001).mul(1.001);
        break;
      case 2:
        x = x.maximum(x0).mul(0.999);
        break;
      default:
        x = x.add(x0).mul(0.5);
        break;
    }
  }
  return x;
}

struct Row {
  double mark_step = 0, first_value = 0, native_ready = 0, later_step = 0;
  int64_t kernels = 0, interpreted_later = 0;
};

Row measure(int ops, bool varied, int64_t elements, bool tiered) {
  // A cold cache: every kernel is compiled by the system compiler in this run.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      ("lt-first-step-" + std::to_string(getpid()) + "-" + std::to_string(ops) +
       (varied ? "v" : "r") + (tiered ? "t" : "w"));
  lt::set_kernel_cache_dir(dir.string());
  lt::set_tiered_compilation(tiered);
  lt::clear_compile_caches();  // forget earlier rows' graphs and kernels
  const lt::Tensor x0 = lt::full({elements}, 0.5);
  lt::mark_step();
  lt::wait_device_ops();
  Row row;
  lt::Tensor x = chain(x0, ops, varied);
  const auto start = Clock::now();
  lt::mark_step();
  row.mark_step = since(start);
  row.kernels = lt::last_step_stats().kernels;
  x.to_vector();
  row.first_value = since(start);
  lt::wait_kernel_compiles();
  row.native_ready = since(start);
  lt::metrics::reset();
  lt::Tensor y = chain(x0, ops, varied);  // the same graph again: a compile-cache hit
  const auto later = Clock::now();
  lt::mark_step();
  y.to_vector();
  row.later_step = since(later);
  row.interpreted_later = lt::metrics::counter_value("InterpretedKernelLaunch");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t elements = argc > 1 ? std::atoll(argv[1]) : 4096;
  lt::set_kernel_compiler("native");
  lt::set_auto_cut_nodes(0);
  std::printf(
      "first step of a new graph: a chain of N elementwise ops over %lld floats, cold "
      "kernel cache, %u hardware threads\n\n",
      static_cast<long long>(elements), std::thread::hardware_concurrency());
  std::printf("%8s %-10s %-7s %8s %12s %14s %14s %12s %s\n", "ops", "chain", "compile", "kernels",
              "mark_step s", "first value s", "native ready s", "later step s", "later step ran");
  const struct {
    int ops;
    bool varied;
  } cases[] = {{1'000, false}, {20'000, false}, {100'000, false}, {1'000, true}, {20'000, true}};
  for (const auto& c : cases) {
    for (bool tiered : {true, false}) {
      const Row r = measure(c.ops, c.varied, elements, tiered);
      std::printf("%8d %-10s %-7s %8lld %12.3f %14.3f %14.3f %12.4f %s\n", c.ops,
                  c.varied ? "varied" : "repeating", tiered ? "tiered" : "wait",
                  static_cast<long long>(r.kernels), r.mark_step, r.first_value, r.native_ready,
                  r.later_step, r.interpreted_later == 0 ? "native" : "interpreted (in part)");
      std::fflush(stdout);
    }
  }
  return 0;
}
