// Host cost of tracing and launching: the HF AdamW step over BERT's tensor count, with tiny
// tensors so that the device's work does not hide the host's. Reports nanoseconds per traced op
// (the target is under 1000).
#include <benchmark/benchmark.h>

#include "lazytensor/lazytensor.h"

namespace {

void trace_adamw_step(benchmark::State& state, const char* model) {
  lt::set_kernel_compiler("interpreter");  // the host cost does not depend on it
  const size_t tensors = lt::models::parameter_shapes(model).size();
  lt::optim::ParamGroup<lt::optim::AdamWOptions> group;
  group.options.weight_decay = 0.01;
  for (size_t i = 0; i < tensors; ++i) {
    group.params.push_back(lt::randn({16}, 2 * i + 1));
    group.grads.push_back(lt::randn({16}, 2 * i + 2));
  }
  lt::optim::AdamW adamw({group});
  for (int warmup = 0; warmup < 3; ++warmup) {
    adamw.step();
    lt::mark_step();
  }
  lt::wait_device_ops();
  int64_t ops = 0;
  double step = 0;
  for (auto _ : state) {
    const int64_t before = lt::metrics::counter_value("TracedOps");
    adamw.set_lr(1e-3 / (1.0 + step++));
    adamw.step();
    lt::mark_step();
    ops += lt::metrics::counter_value("TracedOps") - before;
    state.PauseTiming();
    lt::wait_device_ops();
    state.ResumeTiming();
  }
  state.counters["ops_per_step"] = static_cast<double>(ops) / state.iterations();
  state.counters["ns_per_op"] = benchmark::Counter(
      static_cast<double>(ops), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_TraceAdamWStepBertBase(benchmark::State& state) {
  trace_adamw_step(state, "bert-base");
}
void BM_TraceAdamWStepBertLarge(benchmark::State& state) {
  trace_adamw_step(state, "bert-large");
}

BENCHMARK(BM_TraceAdamWStepBertBase)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TraceAdamWStepBertLarge)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
