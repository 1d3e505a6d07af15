#include "runtime/graph_executor.h"

#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "compiler/kernel_program.h"
#include "ir/graph.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"
#include "runtime/compile_cache.h"
#include "runtime/config.h"

namespace lt::runtime {

namespace {

// Signature records: a header word, the dims, the operand positions, then the attributes.
constexpr uint64_t kOutputsMarker = 0xffff;

uint64_t header(const ir::Node& node) {
  return static_cast<uint64_t>(node.op) | static_cast<uint64_t>(node.dtype) << 16 |
         static_cast<uint64_t>(node.shape.rank()) << 24 |
         static_cast<uint64_t>(node.num_operands) << 32 | static_cast<uint64_t>(node.keepdim) << 40;
}

struct ExecutorState {
  std::mutex mu;  // one mark_step at a time
  CompileCache cache;
  uint64_t epoch = 0;
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

// Walks the graph of `outputs` in post-order, filling the graph and its signature.
void collect(const std::vector<ir::Node*>& outputs, uint64_t epoch, ir::Graph& graph,
             GraphSignature& signature) {
  std::vector<std::pair<ir::Node*, int>> stack;
  auto& words = signature.words;
  for (ir::Node* root : outputs) {
    if (root->visit_epoch == epoch) continue;
    stack.emplace_back(root, 0);
    root->visit_epoch = epoch;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->num_operands) {
        ir::Node* operand = node->operands[next++].get();
        if (operand->visit_epoch != epoch) {
          operand->visit_epoch = epoch;
          stack.emplace_back(operand, 0);
        }
        continue;
      }
      const auto index = static_cast<uint32_t>(graph.nodes.size());
      node->visit_index = index;
      graph.nodes.push_back(node);
      if (node->op == ir::OpKind::DeviceData) graph.inputs.push_back(index);
      if (node->op == ir::OpKind::Scalar) graph.scalars.push_back(index);
      words.push_back(header(*node));
      for (int64_t dim : node->shape) words.push_back(static_cast<uint64_t>(dim));
      for (int i = 0; i < node->num_operands; ++i) words.push_back(node->operands[i]->visit_index);
      if (ir::is_reduction(node->op)) words.push_back(node->reduce_mask);
      if (node->op == ir::OpKind::Constant) words.push_back(std::bit_cast<uint64_t>(node->value));
      stack.pop_back();
    }
  }
  words.push_back(kOutputsMarker);
  for (ir::Node* root : outputs) {
    graph.outputs.push_back(root->visit_index);
    words.push_back(root->visit_index);
  }
  signature.hash = compiler::hash_bytes(words.data(), words.size() * sizeof(uint64_t));
}

// One node's record, decoded, for explaining a recompile.
struct Record {
  size_t begin = 0, end = 0;
  uint64_t header = 0;
};

std::vector<Record> records(const GraphSignature& signature) {
  std::vector<Record> out;
  const auto& w = signature.words;
  for (size_t i = 1; i < w.size() && w[i] != kOutputsMarker;) {
    Record r;
    r.begin = i;
    r.header = w[i];
    const auto op = static_cast<ir::OpKind>(w[i] & 0xffff);
    size_t length = 1 + (w[i] >> 24 & 0xff) + (w[i] >> 32 & 0xff);
    if (ir::is_reduction(op) || op == ir::OpKind::Constant) ++length;
    r.end = i + length;
    out.push_back(r);
    i = r.end;
  }
  return out;
}

std::string describe_difference(const GraphSignature& now, const GraphSignature& cached) {
  const std::vector<Record> a = records(now), b = records(cached);
  auto shape_of = [](const GraphSignature& s, const Record& r) {
    std::string out = "[";
    const size_t rank = r.header >> 24 & 0xff;
    for (size_t d = 0; d < rank; ++d)
      out += (d ? ", " : "") + std::to_string(s.words[r.begin + 1 + d]);
    return out + "]";
  };
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const Record& x = a[i];
    const Record& y = b[i];
    if (std::equal(now.words.begin() + x.begin, now.words.begin() + x.end,
                   cached.words.begin() + y.begin, cached.words.begin() + y.end)) {
      continue;
    }
    const auto op_x = static_cast<ir::OpKind>(x.header & 0xffff);
    const auto op_y = static_cast<ir::OpKind>(y.header & 0xffff);
    std::string where = "node " + std::to_string(i) + " (" + ir::op_info(op_x).name + ")";
    if (op_x != op_y) {
      return where + ": op changed from " + ir::op_info(op_y).name + " to " +
             ir::op_info(op_x).name;
    }
    if ((x.header >> 16 & 0xff) != (y.header >> 16 & 0xff)) {
      return where + ": dtype changed from " +
             dtype_name(static_cast<DType>(y.header >> 16 & 0xff)) + " to " +
             dtype_name(static_cast<DType>(x.header >> 16 & 0xff));
    }
    if (shape_of(now, x) != shape_of(cached, y)) {
      return where + ": shape changed from " + shape_of(cached, y) + " to " + shape_of(now, x);
    }
    if (op_x == ir::OpKind::Constant) {
      return where + ": constant value changed from " +
             std::to_string(std::bit_cast<double>(cached.words[y.end - 1])) + " to " +
             std::to_string(std::bit_cast<double>(now.words[x.end - 1])) +
             " (constants are baked into the graph; the argument scalar policy avoids this)";
    }
    if (ir::is_reduction(op_x) && now.words[x.end - 1] != cached.words[y.end - 1]) {
      return where + ": attribute (reduced dims) changed";
    }
    return where + ": operands changed (a different graph topology)";
  }
  if (a.size() != b.size()) {
    return "the graph has " + std::to_string(a.size()) + " nodes, the nearest cached one " +
           std::to_string(b.size()) + "; the first " +
           std::to_string(std::min(a.size(), b.size())) + " agree";
  }
  return "the same nodes with different outputs (other tensors are live or pending)";
}

}  // namespace

void sync_tensors(const std::vector<std::shared_ptr<TensorImpl>>& tensors, bool allow_donation) {
  static metrics::Counter& mark_steps = metrics::counter("MarkStep");
  static metrics::Counter& cached_compiles = metrics::counter("CachedCompile");
  static metrics::Counter& uncached_compiles = metrics::counter("UncachedCompile");
  static metrics::Counter& donated = metrics::counter("DonatedBuffer");
  static metrics::Timer& trace_time = metrics::timer("TraceTime");
  static metrics::Timer& compile_time = metrics::timer("CompileTime");
  const auto start = std::chrono::steady_clock::now();
  double compile_seconds = 0;

  profiler::Scope span(allow_donation ? "mark_step" : "sync for read", "host");
  ExecutorState& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (allow_donation) mark_steps.add();

  // Tensors whose value is already device data (e.g. t.copy_(u) of a computed u) just share it.
  std::vector<std::shared_ptr<TensorImpl>> pending;
  std::vector<ir::Node*> roots;
  const uint64_t epoch = ++st.epoch;
  for (const auto& impl : tensors) {
    if (!impl->ir) continue;
    if (impl->ir->op == ir::OpKind::DeviceData) {
      impl->set_data(impl->ir->data);
      continue;
    }
    pending.push_back(impl);
    if (impl->ir->visit_epoch != epoch) {
      impl->ir->visit_epoch = epoch;
      roots.push_back(impl->ir.get());
    }
  }
  if (pending.empty()) return;
  for (ir::Node* root : roots) root->visit_epoch = 0;  // let the walk visit them

  ir::Graph graph;
  GraphSignature signature;
  // Executables hold kernels of one compiler: switching compilers must not reuse them.
  signature.words.push_back(config().kernel_compiler() == "native" ? 1 : 2);
  const uint64_t walk_epoch = ++st.epoch;
  collect(roots, walk_epoch, graph, signature);

  backend::Backend& device = backend::default_backend();
  std::shared_ptr<backend::Executable> exe = st.cache.find(signature);
  int64_t compiles_now = 0;
  if (exe) {
    cached_compiles.add();
  } else {
    const auto compile_start = std::chrono::steady_clock::now();
    profiler::Scope compile_span("compile", "compile");
    exe = device.compile(graph);
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
  for (uint32_t i : graph.inputs) args.inputs.push_back(graph.nodes[i]->data->buffer);
  args.scalars.reserve(graph.scalars.size());
  for (uint32_t i : graph.scalars) args.scalars.push_back(graph.nodes[i]->value);

  // Output buffers: an input's, when nothing else holds it, else a fresh one. Everything that
  // can fail happens before any tensor is rebound, so a failure leaves them all pending.
  std::vector<char> taken(graph.inputs.size(), 0);
  int64_t donations = 0;
  std::string failure;
  try {
    for (size_t o = 0; o < graph.outputs.size(); ++o) {
      const ir::Node& node = *graph.nodes[graph.outputs[o]];
      backend::BufferPtr buffer;
      for (int candidate : exe->donation_candidates[o]) {
        const DeviceData& data = *graph.nodes[graph.inputs[candidate]]->data;
        if (allow_donation && !taken[candidate] && data.holders.load() == 0 &&
            !data.buffer->failed()) {
          taken[candidate] = 1;
          buffer = data.buffer;
          ++donations;
          break;
        }
      }
      if (!buffer) buffer = device.allocate(node.shape.numel() * dtype_size(node.dtype));
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
    device.report_failure(failure);
  }
  donated.add(donations);

  std::vector<DeviceDataPtr> results(graph.outputs.size());
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    const ir::Node& node = *graph.nodes[graph.outputs[o]];
    results[o] = std::make_shared<DeviceData>(node.shape, node.dtype, args.outputs[o]);
  }
  std::vector<int32_t> output_position(graph.nodes.size(), -1);
  for (size_t o = 0; o < graph.outputs.size(); ++o) {
    output_position[graph.outputs[o]] = static_cast<int32_t>(o);
  }
  for (const auto& impl : pending) impl->set_data(results[output_position[impl->ir->visit_index]]);

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

  if (failure.empty()) device.execute(exe, std::move(args));
  trace_time.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() -
      compile_seconds);
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

size_t compile_cache_entries() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().cache.size();
}

}  // namespace lt::runtime
