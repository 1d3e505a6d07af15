#include "runtime/graph_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "backend/backend.h"
#include "backend/registry.h"
#include "ir/graph.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"
#include "runtime/backends.h"
#include "runtime/compile_cache.h"
#include "runtime/config.h"
#include "runtime/device.h"
#include "runtime/device_data.h"
#include "runtime/front_end_hooks.h"
#include "runtime/graph_signature.h"
#include "runtime/step_journal.h"
#include "runtime/trace_locations.h"
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
  // A loop that reads values but never calls mark_step() keeps its parameters pending, so
  // each read runs every earlier step again: more of them at each read. What the previous
  // read ran (op serials), how many of those it ran again, and how many reads in a row ran
  // more again than the read before, since the last mark_step.
  std::unordered_set<uint64_t> ran_for_last_read;
  int64_t rerun_by_last_read = 0;
  int rerunning_reads = 0;
  bool warned_rerunning_reads = false;
};

// Reads in a row that run more of the previous read's ops again than the read before them
// did, with no mark_step, before the warning. A loop without mark_step reruns one step at its
// second read, two at its third, and is warned at its fourth step. Legitimate reruns stay
// flat: a value traced before an earlier read, or parameters initialized when first used and
// read by every micro-batch of gradient accumulation before the first cut.
constexpr int kRerunningReadsBeforeWarning = 3;

ExecutorState& state() {
  static ExecutorState* s = new ExecutorState();
  return *s;
}

// One device's part of a cut: its pending tensors, their graph and its executable.
struct DeviceGraph {
  Device device;
  std::vector<std::shared_ptr<TensorImpl>> pending;
  ir::Graph graph;
  GraphSignature signature;
  std::vector<uint32_t> output_of_root;
  std::shared_ptr<backend::Executable> executable;
  bool compiled = false;
  double compile_seconds = 0;
};

// How graphs are cut into kernels, read from the settings once per cut: the graph's cache key
// and its executable then agree on it even if a setting changes meanwhile.
backend::CompileOptions compile_options() {
  const Config& c = config();
  backend::CompileOptions options;
  options.fusion.max_kernel_ops = c.max_kernel_ops;
  options.fusion.row_groups = c.row_groups;
  return options;
}

// Tensors whose value is already device data (e.g. t.copy_(u) of a computed u) just share it;
// the others make one graph per device.
std::vector<DeviceGraph> collect_device_graphs(
    const std::vector<std::shared_ptr<TensorImpl>>& tensors,
    const backend::CompileOptions& options) {
  const backend::BackendSettings settings = backend_settings();
  std::vector<DeviceGraph> out;
  for (const auto& impl : tensors) {
    if (!impl->ir) continue;
    if (impl->ir->op == ir::OpKind::DeviceData) {
      impl->set_data(impl->ir->data);
      continue;
    }
    auto group = std::find_if(out.begin(), out.end(),
                              [&](const DeviceGraph& g) { return g.device == impl->device; });
    if (group == out.end()) {
      group = out.insert(out.end(), DeviceGraph{});
      group->device = impl->device;
    }
    group->pending.push_back(impl);
  }
  for (DeviceGraph& g : out) {
    std::vector<const ir::Node*> roots;
    for (const auto& impl : g.pending) roots.push_back(impl->ir.get());
    // Executables are compiled for one device, with its backend's settings and one kernel
    // length: graphs for another must not find them. The backend is given the settings as
    // they are now, under the cut, so the key and the executable agree on them.
    backend::Backend& backend = backend_of(g.device);
    backend.update_settings(settings);
    const uint64_t target = backend.compile_fingerprint() | (options.fusion.row_groups ? 4 : 0) |
                            static_cast<uint64_t>(g.device.type) << 8 |
                            static_cast<uint64_t>(g.device.index) << 16 |
                            static_cast<uint64_t>(options.fusion.max_kernel_ops) << 32;
    build_graph(roots, target, g.graph, g.signature, g.output_of_root, config().symbolic_sizes);
  }
  return out;
}

// The difference from the nearest cached graph, and where the op that differs was traced when
// that is known (LT_DEBUG with a front end's location provider).
std::string describe_with_location(const DeviceGraph& g, const GraphSignature& near) {
  size_t node = 0;
  std::string text = describe_difference(g.signature, near, &node);
  if (node < g.graph.nodes.size()) {
    const std::string where = trace_location_of(g.graph.nodes[node]->serial);
    if (!where.empty()) text += " (traced at " + where + ")";
  }
  return text;
}

// Finds the graph's executable in the compile cache (bound to its sizes now if they are new)
// or compiles it. Rebinds nothing, so a compile that throws leaves every tensor of the cut
// pending.
void find_or_compile(DeviceGraph& g, const backend::CompileOptions& options) {
  static metrics::Counter& cached_compiles = metrics::counter("CachedCompile");
  static metrics::Counter& uncached_compiles = metrics::counter("UncachedCompile");
  static metrics::Timer& compile_time = metrics::timer("CompileTime");
  ExecutorState& st = state();
  std::string sizes_break;
  {
    profiler::Scope find_span("find graph", "host");
    g.executable = st.cache.find(g.signature, g.graph, sizes_break);
  }
  if (g.executable) {
    cached_compiles.add();
    return;
  }
  const auto compile_start = std::chrono::steady_clock::now();
  std::shared_ptr<backend::CompiledGraph> compiled;
  {
    profiler::Scope compile_span("compile", "compile");
    compiled = backend_of(g.device).compile(g.graph, options);
    std::string why;
    g.executable = compiled->bind(g.graph, &why);
    if (!g.executable) {
      throw Error("mark_step: a graph's plan does not hold for the sizes it was made from (" + why +
                  "); this is a bug in lazytensor");
    }
  }
  g.compile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
  g.compiled = true;
  compile_time.record(g.compile_seconds);
  uncached_compiles.add();
  if (st.compiles > 0) {
    const GraphSignature* near = st.cache.nearest(g.signature);
    st.last_recompile_reason =
        "compile #" + std::to_string(st.compiles + 1) + " at step " + std::to_string(st.steps + 1) +
        ": " +
        (!sizes_break.empty()
             ? "a graph of this structure is compiled, but its plan rests on a relation "
               "between sizes that these sizes break: " +
                   sizes_break
         : near ? describe_with_location(g, *near)
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
  st.cache.insert(g.signature, std::move(compiled), g.executable);
}

// Per output: the value its tensor had before the step, when the output is an in-place update
// of one tensor (a parameter, a moment); null for new values. A failed step gives these back.
std::vector<DeviceDataPtr> values_before(const DeviceGraph& g) {
  const size_t n = g.graph.outputs.size();
  std::vector<DeviceDataPtr> before(n);
  std::vector<char> seen(n, 0), shared(n, 0);
  for (size_t r = 0; r < g.pending.size(); ++r) {
    const uint32_t o = g.output_of_root[r];
    const ir::Node& node = g.graph.node(g.graph.outputs[o]);
    DeviceDataPtr value = g.pending[r]->before_step;
    if (value && (value->buffer->failed() || value->shape != node.shape ||
                  value->dtype != node.dtype || value->device != g.device)) {
      value.reset();
    }
    if (!seen[o]) {
      seen[o] = 1;
      before[o] = std::move(value);
    } else if (value != before[o]) {
      // Two tensors with one new value but different old ones: one buffer cannot give both
      // back, so neither is (documented as a limit of failed steps).
      shared[o] = 1;
    }
  }
  for (size_t o = 0; o < n; ++o) {
    if (shared[o]) before[o].reset();
  }
  return before;
}

// Picks the output buffers, rebinds the tensors to their future values and launches. Returns
// the number of donated buffers; `failure` says why the step could not be launched.
int64_t launch(DeviceGraph& g, int64_t step, bool allow_donation,
               const std::shared_ptr<StepRecord>& record, std::string& failure) {
  const ir::Graph& graph = g.graph;
  const backend::Executable& exe = *g.executable;
  backend::Backend& backend = backend_of(g.device);
  backend::ExecutionArgs args;
  args.step = step;
  args.inputs.reserve(graph.inputs.size());
  for (uint32_t i : graph.inputs) args.inputs.push_back(graph.node(i).data->buffer);
  args.scalars.reserve(graph.scalars.size());
  for (uint32_t i : graph.scalars) args.scalars.push_back(graph.node(i).value);

  // A buffer holding a value from before the step may be donated only to the output that
  // replaces that value: no other output may overwrite it before the step is known to succeed.
  const std::vector<DeviceDataPtr> before = values_before(g);
  std::unordered_map<const backend::Buffer*, size_t> kept_for;
  for (size_t o = 0; o < before.size(); ++o) {
    if (before[o]) kept_for.emplace(before[o]->buffer.get(), o);
  }

  // Output buffers: an input's, when nothing else holds it, else a fresh one. Everything that
  // can fail happens before any tensor is rebound.
  std::vector<char> taken(graph.inputs.size(), 0);
  int64_t donations = 0;
  try {
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      const ir::Node& node = graph.node(graph.outputs[o]);
      backend::BufferPtr buffer;
      for (int candidate : exe.donation_candidates[o]) {
        const DeviceData& data = *graph.node(graph.inputs[candidate]).data;
        const auto kept = kept_for.find(data.buffer.get());
        if (kept != kept_for.end() && kept->second != o) continue;
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
    // The step cannot run (no memory for its outputs). It commits nothing: tensors updated in
    // place keep their values, new values throw when read, and mark_step raises it.
    const backend::Failure why = backend::Failure::of(e, args.step);
    failure = why.message;
    std::vector<DeviceDataPtr> results(graph.outputs.size());
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      const ir::Node& node = graph.node(graph.outputs[o]);
      if (before[o]) {
        results[o] = before[o];
        continue;
      }
      auto failed = std::make_shared<backend::Buffer>(nullptr, 0, nullptr);
      failed->set_error(why);
      results[o] = std::make_shared<DeviceData>(node.shape, node.dtype, g.device, failed);
    }
    for (size_t r = 0; r < g.pending.size(); ++r) {
      g.pending[r]->set_data(results[g.output_of_root[r]]);
    }
    if (record) mark_step_failed(record);
    return 0;
  }

  args.rollback.resize(graph.outputs.size());
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    if (before[o]) args.rollback[o] = before[o]->buffer;
  }
  if (record) args.on_failure = [record] { mark_step_failed(record); };
  std::vector<DeviceDataPtr> results(graph.outputs.size());
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    const ir::Node& node = graph.node(graph.outputs[o]);
    results[o] = std::make_shared<DeviceData>(node.shape, node.dtype, g.device, args.outputs[o]);
  }
  for (size_t r = 0; r < g.pending.size(); ++r) {
    g.pending[r]->set_data(results[g.output_of_root[r]]);
  }
  backend.execute(g.executable, std::move(args));
  return donations;
}

// Counts the ops of a read's graphs that the previous read ran too, and warns once when
// several reads in a row did so: the sign of a training loop that never calls mark_step().
void note_read(ExecutorState& st, const std::vector<DeviceGraph>& graphs) {
  std::unordered_set<uint64_t> ran;
  int64_t again = 0;
  for (const DeviceGraph& g : graphs) {
    for (const ir::Node* node : g.graph.nodes) {
      if (ir::is_leaf(node->op)) continue;
      ran.insert(node->serial);
      again += st.ran_for_last_read.count(node->serial);
    }
  }
  st.ran_for_last_read.swap(ran);
  st.rerunning_reads = again > st.rerun_by_last_read ? st.rerunning_reads + 1 : 0;
  st.rerun_by_last_read = again;
  if (st.rerunning_reads < kRerunningReadsBeforeWarning || st.warned_rerunning_reads) return;
  st.warned_rerunning_reads = true;
  const char* mark_step = in_callers_words("lt::mark_step()", "lazytensor.mark_step()");
  std::fprintf(stderr,
               "lazytensor: warning: %d reads in a row ran more of the ops that the read "
               "before had run, and no %s has cut the graph since: every read runs all earlier "
               "steps again "
               "(this one ran %zu ops, %lld of them again), so each step costs more than the "
               "last. Call %s once per iteration, after the optimizer step.\n",
               st.rerunning_reads, mark_step, st.ran_for_last_read.size(),
               static_cast<long long>(again), mark_step);
}

// A cut, in phases: collect each device's graph, find or compile every executable (nothing
// rebound yet), then launch them all, and count the cut as one step. Returns why a graph could
// not be launched (empty if all were).
std::string sync_locked(const std::vector<std::shared_ptr<TensorImpl>>& tensors,
                        bool allow_donation) {
  static metrics::Counter& mark_steps = metrics::counter("MarkStep");
  static metrics::Counter& donated = metrics::counter("DonatedBuffer");
  static metrics::Timer& trace_time = metrics::timer("TraceTime");
  const auto start = std::chrono::steady_clock::now();
  profiler::Scope span(allow_donation ? "mark_step" : "sync for read", "host");
  ExecutorState& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (allow_donation) mark_steps.add();

  const backend::CompileOptions options = compile_options();
  std::vector<DeviceGraph> graphs = collect_device_graphs(tensors, options);
  if (allow_donation) {
    st.ran_for_last_read.clear();
    st.rerun_by_last_read = 0;
    st.rerunning_reads = 0;
  } else {
    note_read(st, graphs);
  }
  // A mark_step is a step of the host's state too (optimizers, the generator): the undos
  // registered since the last one go with it, even when it has nothing to run.
  const std::shared_ptr<StepRecord> record =
      allow_donation ? begin_step_record(st.steps + 1) : nullptr;
  if (graphs.empty()) return {};
  for (DeviceGraph& g : graphs) find_or_compile(g, options);

  StepStats stats;
  stats.step = ++st.steps;
  std::string failure;
  stats.cache_hit = true;
  int64_t compiles_now = 0;
  double compile_seconds = 0;
  for (DeviceGraph& g : graphs) {
    stats.graph_nodes += static_cast<int64_t>(g.graph.nodes.size());
    stats.outputs += static_cast<int64_t>(g.graph.outputs.size());
    stats.inputs += static_cast<int64_t>(g.graph.inputs.size());
    stats.scalar_args += static_cast<int64_t>(g.graph.scalars.size());
    stats.kernels += g.executable->num_kernels;
    stats.launches += g.executable->num_launches;
    stats.temporary_bytes += g.executable->temporary_bytes;
    stats.cache_hit = stats.cache_hit && !g.compiled;
    compiles_now += g.compiled ? 1 : 0;
    compile_seconds += g.compile_seconds;
    std::string why;
    stats.donated_buffers += launch(g, stats.step, allow_donation, record, why);
    if (failure.empty()) failure = why;
  }
  donated.add(stats.donated_buffers);
  st.last_stats = stats;
  if (!st.compile_runs.empty() && st.compile_runs.back().second == compiles_now) {
    ++st.compile_runs.back().first;
  } else {
    st.compile_runs.emplace_back(1, compiles_now);
  }
  trace_time.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
      compile_seconds);
  return failure;
}

}  // namespace

void sync_pending() {
  std::string failure;
  int64_t step = 0;
  {
    const CutScope cut("mark_step");
    // Front ends trace their last work into the step here (autocast: the kept copies of
    // parameters it updates, in the kernels that update them).
    run_step_cut_hooks();
    // Taken under the cut: a tensor another thread makes pending now is in this graph or
    // waits.
    failure = sync_locked(pending_tensors(), /*allow_donation=*/true);
    std::lock_guard<std::mutex> lock(state().mu);
    step = state().steps;
  }
  if (!failure.empty()) {
    settle_failed_step();
    throw Error("mark_step: " + failure);
  }
  // An earlier step that failed on the device and was not raised yet (no value of it was
  // read): raised here, after this step was launched, so that a loop that never reads hears
  // of it by the next step. This step's own failure is left for its reads (deterministically).
  for (backend::Backend* backend : backend::live_backends()) {
    const backend::Failure earlier = backend->take_failure_before(step);
    if (!earlier.empty()) {
      settle_failed_step();
      earlier.raise("mark_step: ");
    }
  }
}

namespace {

// The tensors a read computes: those asked for, every live pending tensor whose value their
// graph computes on the way, and every live pending tensor that is one elementwise op, view or
// concatenation of values of that graph (and of leaves: data, numbers), such as a generation
// loop's context with the token just read appended. Reading the new token then leaves the
// context as data, instead of a pending concatenation whose operand is the whole forward pass:
// the next read would run it again, and every earlier one. Left out: views of leaves (a copy
// for nothing), in-place updates (a read must not commit them ahead of their step: a failed
// mark_step gives them back) and every other opaque op (a collective run by one rank's read
// alone would leave the ranks out of step; an index check would fail a read that did not ask
// for it).
std::vector<std::shared_ptr<TensorImpl>> with_what_the_read_computes(
    const std::vector<std::shared_ptr<TensorImpl>>& tensors) {
  std::unordered_set<const ir::Node*> in_graph;
  std::vector<const ir::Node*> stack;
  for (const auto& impl : tensors) {
    if (impl->ir && in_graph.insert(impl->ir.get()).second) stack.push_back(impl->ir.get());
  }
  if (stack.empty()) return tensors;
  while (!stack.empty()) {
    const ir::Node* node = stack.back();
    stack.pop_back();
    for (int k = 0; k < node->num_operands(); ++k) {
      const ir::Node* operand = node->operands[k].get();
      if (in_graph.insert(operand).second) stack.push_back(operand);
    }
  }
  std::vector<std::shared_ptr<TensorImpl>> out = tensors;
  std::unordered_set<const TensorImpl*> asked;
  for (const auto& impl : tensors) asked.insert(impl.get());
  // A computed value of the graph, or a view of one: not a leaf, nor a view of a leaf.
  const auto computed_by_graph = [&](const ir::Node& value) {
    const ir::Node& storage = ir::is_view(value.op) ? value.operand(0) : value;
    return !ir::is_leaf(storage.op) && in_graph.count(&storage) > 0;
  };
  for (const auto& impl : pending_tensors()) {
    const ir::Node* node = impl->ir.get();
    if (!node || impl->before_step || asked.count(impl.get())) continue;
    const ir::Node& storage = ir::is_view(node->op) ? node->operand(0) : *node;
    if (ir::is_leaf(storage.op)) continue;
    bool computed = in_graph.count(node) > 0;
    if (!computed &&
        (ir::is_elementwise(node->op) || ir::is_view(node->op) || node->op == ir::OpKind::Cat)) {
      int from_graph = 0, elsewhere = 0;
      for (int k = 0; k < node->num_operands(); ++k) {
        const ir::Node& operand = node->operand(k);
        if (ir::is_leaf(operand.op)) continue;
        ++(computed_by_graph(operand) ? from_graph : elsewhere);
      }
      computed = from_graph > 0 && elsewhere == 0;
    }
    if (computed) out.push_back(impl);
  }
  return out;
}

}  // namespace

DeviceDataPtr sync_tensors(const std::vector<std::shared_ptr<TensorImpl>>& tensors,
                           const char* op) {
  std::string failure;
  {
    const CutScope cut(op);
    failure = sync_locked(with_what_the_read_computes(tensors), /*allow_donation=*/false);
  }
  if (!failure.empty()) throw Error(std::string(op) + ": " + failure);
  return tensors.empty() ? nullptr : tensors.front()->data;
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

void rearm_rerunning_reads_warning() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().warned_rerunning_reads = false;
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
