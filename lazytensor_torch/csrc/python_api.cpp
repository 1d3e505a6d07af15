// The functions of `lazytensor_torch` (mark_step, metrics, the scalar policy, the generator),
// as operators in the `lazytensor_torch` namespace: Python reaches them through torch.ops,
// so the extension needs no binding library of its own.
#include <lazytensor/lazytensor.h>
#include <torch/library.h>

#include <string>
#include <vector>

namespace lazytensor_torch {
namespace {

void set_scalar_policy(std::string name) {
  lt::set_scalar_policy(lt::parse_scalar_policy(name));
}

std::string scalar_policy() {
  return lt::scalar_policy_name(lt::scalar_policy());
}

int64_t counter_value(std::string name) {
  return lt::metrics::counter_value(name);
}

std::vector<std::string> counter_names() {
  return lt::metrics::counter_names();
}

std::string report() {
  return lt::metrics::report();
}

void reset_metrics() {
  lt::metrics::reset();
}

void manual_seed(int64_t seed) {
  lt::manual_seed(static_cast<uint64_t>(seed));
}

// The generator's state as [seed, offset]: what get_rng_state/set_rng_state carry.
std::vector<int64_t> generator_state() {
  const lt::GeneratorState state = lt::generator_state();
  return {static_cast<int64_t>(state.seed), static_cast<int64_t>(state.offset)};
}

void set_generator_state(int64_t seed, int64_t offset) {
  lt::set_generator_state({static_cast<uint64_t>(seed), static_cast<uint64_t>(offset)});
}

int64_t live_ir_nodes() {
  return lt::live_ir_nodes();
}

std::vector<int64_t> compiles_per_step() {
  return lt::compiles_per_step();
}

// The engine's timeline (Chrome trace-event JSON): started, then stopped and written.
void start_profiler() {
  lt::profiler::start();
}

void write_profile(std::string path) {
  lt::profiler::stop();
  lt::profiler::write_chrome_trace(path);
}

}  // namespace

TORCH_LIBRARY(lazytensor_torch, m) {
  m.def("mark_step", [] { lt::mark_step(); });
  m.def("wait_device_ops", [] { lt::wait_device_ops(); });
  m.def("set_scalar_policy", set_scalar_policy);
  m.def("scalar_policy", scalar_policy);
  m.def("counter_value", counter_value);
  m.def("counter_names", counter_names);
  m.def("report", report);
  m.def("reset_metrics", reset_metrics);
  m.def("manual_seed", manual_seed);
  m.def("generator_state", generator_state);
  m.def("set_generator_state", set_generator_state);
  m.def("live_ir_nodes", live_ir_nodes);
  m.def("compiles_per_step", compiles_per_step);
  m.def("start_profiler", start_profiler);
  m.def("write_profile", write_profile);
}

}  // namespace lazytensor_torch
