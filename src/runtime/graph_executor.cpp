#include "runtime/graph_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "ir/graph.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"
#include "runtime/compile_cache.h"
#include "runtime/config.h"
#include "runtime/device_data.h"
#include "runtime/graph_signature.h"
#include "runtime/trace_lock.h"

namespace lt::runtime {

namespace {

struct ExecutorState {
  std::mutex mu;  // one mark_step at a time
  CompileCache cache;
  int64_t steps = 0;
  int64_t compiles = 0;
  // Compiles per step, run-length encoded (steps, compiles) so that a long run stays small.
  std::vector<std::pair<int64_t, int64_t>> compile_runs;
  std::string last_recompile_reason;
  StepStats last_stats;
};

ExecutorState& state() {
  static ExecutorState* s = new ExecutorState();
  return *s;
}

// Compiles (or finds) and launches the graph of `pending` (all on `device`).
void run_graph(const std::vector<std::shared_ptr<TensorImpl>>& pending, const Device& device,
               bool allow_donation) {
  static metrics::Counter& cached_compiles = metrics::counter("CachedCompile");
  static metrics::Counter& uncached_compiles = metrics::counter("UncachedCompile");
  static metrics::Counter& donated = metrics::counter("DonatedBuffer");
  static metrics::Timer& trace_time = metrics::timer("TraceTime");
  static metrics::Timer& compile_time = metrics::timer("CompileTime");
  const auto start = std::chrono::steady_clock::now();
  double compile_seconds = 0;

  ExecutorState& st = state();
  std::vector<const ir::Node*> roots;
  for (const auto& impl : pending) roots.push_back(impl->ir.get());
  ir::Graph graph;
  GraphSignature signature;
  std::vector<uint32_t> output_of_root;
  // Executables are compiled for one device and hold kernels of one compiler: graphs for
  // another device or compiler must not find them.
  const uint64_t target = (config().kernel_compiler() == "native" ? 1 : 2) |
                          static_cast<uint64_t>(device.type) << 8 |
                          static_cast<uint64_t>(device.index) << 16;
  build_graph(roots, target, graph, signature, output_of_root);

  backend::Backend& backend = backend_of(device);
  std::shared_ptr<backend::Executable> exe = st.cache.find(signature);
  int64_t compiles_now = 0;
  if (exe) {
    cached_compiles.add();
  } else {
    const auto compile_start = std::chrono::steady_clock::now();
    profiler::Scope compile_span("compile", "compile");
    exe = backend.compile(graph);
    compile_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    compile_time.record(compile_seconds);
    uncached_compiles.add();
    compiles_now = 1;
    if (st.compiles > 0) {
      const GraphSignature* near = st.cache.nearest(signature);
      st.last_recompile_reason =
          "compile #" + std::to_string(st.compiles + 1) + " at step " +
          std::to_string(st.steps + 1) + ": " +
          (near ? "nearest cached graph differs at " + describe_difference(signature, *near)
                : std::string("the compile cache is empty (evicted)"));
      if (config().debug) {
        std::string per_step;
        for (const auto& [steps, compiles] : st.compile_runs) {
          per_step +=
              std::to_string(compiles) + (steps > 1 ? " x" + std::to_string(steps) : "") + " ";
        }
        std::fprintf(stderr, "lazytensor: %s\nlazytensor: compiles per step so far: %s\n",
                     st.last_recompile_reason.c_str(), per_step.c_str());
      }
    }
    ++st.compiles;
    st.cache.insert(signature, exe);
  }

  backend::ExecutionArgs args;
  args.step = st.steps + 1;
  args.inputs.reserve(graph.inputs.size());
  for (uint32_t i : graph.inputs) args.inputs.push_back(graph.node(i).data->buffer);
  args.scalars.reserve(graph.scalars.size());
  for (uint32_t i : graph.scalars) args.scalars.push_back(graph.node(i).value);

  // Output buffers: an input's, when nothing else holds it, else a fresh one. Everything that
  // can fail happens before any tensor is rebound, so a failure leaves them all pending.
  std::vector<char> taken(graph.inputs.size(), 0);
  int64_t donations = 0;
  std::string failure;
  try {
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      const ir::Node& node = graph.node(graph.outputs[o]);
      backend::BufferPtr buffer;
      for (int candidate : exe->donation_candidates[o]) {
        const DeviceData& data = *graph.node(graph.inputs[candidate]).data;
        if (allow_donation && !taken[candidate] && data.holders.load() == 0 &&
            !data.buffer->failed()) {
          taken[candidate] = 1;
          buffer = data.buffer;
          ++donations;
          break;
        }
      }
      if (!buffer) buffer = backend.allocate(node.shape.numel() * dtype_size(node.dtype));
      args.outputs.push_back(std::move(buffer));
    }
  } catch (const Error& e) {
    // The step cannot run. Its outputs become values that throw when read, the next
    // wait_device_ops() reports it, and nothing else is affected: later steps still run.
    failure = "step " + std::to_string(args.step) + " failed: " + e.what();
    donations = 0;
    args.outputs.clear();
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      auto failed = std::make_shared<backend::Buffer>(nullptr, 0, nullptr);
      failed->set_error(failure);
      args.outputs.push_back(std::move(failed));
    }
    backend.report_failure(failure);
  }
  donated.add(donations);

  std::vector<DeviceDataPtr> results(graph.outputs.size());
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    const ir::Node& node = graph.node(graph.outputs[o]);
    results[o] = std::make_shared<DeviceData>(node.shape, node.dtype, device, args.outputs[o]);
  }
  for (size_t r = 0; r < pending.size(); ++r) pending[r]->set_data(results[output_of_root[r]]);

  st.last_stats = StepStats{};
  st.last_stats.step = ++st.steps;
  st.last_stats.graph_nodes = static_cast<int64_t>(graph.nodes.size());
  st.last_stats.outputs = static_cast<int64_t>(graph.outputs.size());
  st.last_stats.inputs = static_cast<int64_t>(graph.inputs.size());
  st.last_stats.scalar_args = static_cast<int64_t>(graph.scalars.size());
  st.last_stats.kernels = exe->num_kernels;
  st.last_stats.launches = exe->num_launches;
  st.last_stats.donated_buffers = donations;
  st.last_stats.cache_hit = compiles_now == 0;
  if (!st.compile_runs.empty() && st.compile_runs.back().second == compiles_now) {
    ++st.compile_runs.back().first;
  } else {
    st.compile_runs.emplace_back(1, compiles_now);
  }

  if (failure.empty()) backend.execute(exe, std::move(args));
  trace_time.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
      compile_seconds);
}

void sync_locked(const std::vector<std::shared_ptr<TensorImpl>>& tensors, bool allow_donation) {
  static metrics::Counter& mark_steps = metrics::counter("MarkStep");
  profiler::Scope span(allow_donation ? "mark_step" : "sync for read", "host");
  std::lock_guard<std::mutex> lock(state().mu);
  if (allow_donation) mark_steps.add();

  // Tensors whose value is already device data (e.g. t.copy_(u) of a computed u) just share
  // it; the others make one graph per device.
  std::vector<std::pair<Device, std::vector<std::shared_ptr<TensorImpl>>>> by_device;
  for (const auto& impl : tensors) {
    if (!impl->ir) continue;
    if (impl->ir->op == ir::OpKind::DeviceData) {
      impl->set_data(impl->ir->data);
      continue;
    }
    auto group = std::find_if(by_device.begin(), by_device.end(),
                              [&](const auto& g) { return g.first == impl->device; });
    if (group == by_device.end()) group = by_device.insert(by_device.end(), {impl->device, {}});
    group->second.push_back(impl);
  }
  for (const auto& [device, pending] : by_device) run_graph(pending, device, allow_donation);
}

}  // namespace

void sync_pending() {
  const CutScope cut("mark_step");
  // Taken under the cut: a tensor another thread makes pending now is in this graph or waits.
  sync_locked(pending_tensors(), /*allow_donation=*/true);
}

void sync_tensors(const std::vector<std::shared_ptr<TensorImpl>>& tensors) {
  const CutScope cut("to_vector");
  sync_locked(tensors, /*allow_donation=*/false);
}

StepStats last_step_stats() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_stats;
}

std::string last_recompile_reason() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().last_recompile_reason;
}

std::vector<int64_t> compiles_per_step() {
  std::lock_guard<std::mutex> lock(state().mu);
  std::vector<int64_t> out;
  for (const auto& [steps, compiles] : state().compile_runs) out.insert(out.end(), steps, compiles);
  return out;
}

void clear_compile_cache() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().cache.clear();
}

size_t compile_cache_entries() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().cache.size();
}

}  // namespace lt::runtime
