#include "compiler/fusion.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace lt::compiler {

namespace {

struct UnionFind {
  std::vector<uint32_t> parent;
  explicit UnionFind(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  uint32_t find(uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void unite(uint32_t a, uint32_t b) { parent[find(a)] = find(b); }
};

ReduceKind reduce_kind(ir::OpKind op) {
  switch (op) {
    case ir::OpKind::Sum:
      return ReduceKind::Sum;
    case ir::OpKind::Mean:
      return ReduceKind::Mean;
    case ir::OpKind::Max:
      return ReduceKind::Max;
    case ir::OpKind::Norm:
      return ReduceKind::Norm;
    case ir::OpKind::ArgMax:
      return ReduceKind::ArgMax;
    default:
      return ReduceKind::None;
  }
}

// Emits the program for `members` (node indices in topological order); operands outside the
// set become inputs, scalar arguments or constants.
class ProgramBuilder {
 public:
  ProgramBuilder(const ir::Graph& graph, Kernel& kernel) : graph_(graph), kernel_(kernel) {}

  int32_t reg_for(uint32_t index) {
    auto it = regs_.find(index);
    if (it != regs_.end()) return it->second;
    const ir::Node& node = graph_.node(index);
    Instr instr;
    instr.dtype = node.dtype;
    if (node.op == ir::OpKind::Scalar) {
      instr.kind = InstrKind::Scalar;
      instr.index = kernel_.program.num_scalars++;
      kernel_.scalar_nodes.push_back(index);
    } else if (node.op == ir::OpKind::Constant) {
      instr.kind = InstrKind::Constant;
      instr.constant = node.value;
    } else {
      instr.kind = InstrKind::Input;
      instr.index = kernel_.program.num_inputs();
      kernel_.program.input_dtypes.push_back(node.dtype);
      kernel_.input_nodes.push_back(index);
    }
    return add(index, instr);
  }

  void emit(uint32_t index) {
    const ir::Node& node = graph_.node(index);
    Instr instr;
    instr.kind = InstrKind::Op;
    instr.op = node.op;
    instr.dtype = node.dtype;
    if (node.op == ir::OpKind::StochasticRound) instr.index = static_cast<int32_t>(node.attrs[0]);
    for (int k = 0; k < graph_.num_operands(index); ++k) {
      instr.args[k] = reg_for(graph_.operand(index, k));
    }
    add(index, instr);
  }

 private:
  int32_t add(uint32_t index, const Instr& instr) {
    auto reg = static_cast<int32_t>(kernel_.program.instrs.size());
    kernel_.program.instrs.push_back(instr);
    regs_.emplace(index, reg);
    return reg;
  }

  const ir::Graph& graph_;
  Kernel& kernel_;
  std::unordered_map<uint32_t, int32_t> regs_;
};

}  // namespace

std::vector<Kernel> partition(const ir::Graph& graph, const FusionOptions& options) {
  const size_t n = graph.nodes.size();
  const size_t max_ops = std::max<size_t>(1, options.max_kernel_ops);
  std::vector<std::vector<uint32_t>> users(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (int k = 0; k < graph.num_operands(i); ++k) users[graph.operand(i, k)].push_back(i);
  }
  std::vector<char> is_output(n, 0);
  for (uint32_t out : graph.outputs) is_output[out] = 1;
  auto elementwise = [&](uint32_t i) { return ir::is_elementwise(graph.node(i).op); };
  auto reduction = [&](uint32_t i) { return ir::is_reduction(graph.node(i).op); };
  auto same_shape = [&](uint32_t a, uint32_t b) {
    return graph.node(a).shape == graph.node(b).shape;
  };

  // Elementwise nodes read only by reductions (directly or through other such nodes of the
  // same shape) are recomputed inside the reductions instead of being written out, unless
  // that would make a reduction's program longer than max_ops: then they are materialized.
  std::vector<char> folded(n, 0), unfoldable(n, 0);
  // An Iota's values (and the random bits of a stochastic rounding or a Bernoulli draw) are
  // functions of positions in its kernel's iteration space, which a reduction walks in another
  // order: never folded.
  for (uint32_t i = 0; i < n; ++i) {
    const ir::OpKind op = graph.node(i).op;
    unfoldable[i] =
        op == ir::OpKind::Iota || op == ir::OpKind::StochasticRound || op == ir::OpKind::Bernoulli;
  }
  auto fold = [&] {
    for (size_t r = n; r-- > 0;) {
      auto i = static_cast<uint32_t>(r);
      folded[i] = 0;
      if (!elementwise(i) || is_output[i] || users[i].empty() || unfoldable[i]) continue;
      folded[i] = std::all_of(users[i].begin(), users[i].end(), [&](uint32_t u) {
        return reduction(u) || (folded[u] && same_shape(i, u));
      });
    }
  };
  // The folded producers of reduction i, in topological order.
  auto folded_producers = [&](uint32_t i) {
    const uint32_t operand = graph.operand(i, 0);
    std::vector<uint32_t> producers;
    std::vector<uint32_t> stack;
    if (folded[operand]) stack.push_back(operand);
    std::unordered_map<uint32_t, char> seen;
    while (!stack.empty()) {
      uint32_t p = stack.back();
      stack.pop_back();
      if (!seen.emplace(p, 1).second) continue;
      producers.push_back(p);
      for (int k = 0; k < graph.num_operands(p); ++k) {
        uint32_t q = graph.operand(p, k);
        if (folded[q] && same_shape(p, q)) stack.push_back(q);
      }
    }
    std::sort(producers.begin(), producers.end());
    return producers;
  };
  fold();
  bool refold = false;
  for (uint32_t i = 0; i < n; ++i) {
    if (!reduction(i)) continue;
    const std::vector<uint32_t> producers = folded_producers(i);
    if (producers.size() <= max_ops) continue;
    for (uint32_t p : producers) unfoldable[p] = 1;
    refold = true;
  }
  if (refold) fold();  // unfolding only shrinks the other reductions' producer sets

  // Levels, assigned from the outputs backwards: a fusible edge keeps the level, an edge that
  // needs the producer in memory raises it by one.
  std::vector<int> level(n, 0);
  auto fusible = [&](uint32_t producer, uint32_t user) {
    if (ir::is_view(graph.node(producer).op)) return true;  // read in place by its user
    if (folded[producer]) return true;  // all its users are reductions or folded nodes
    return elementwise(producer) && elementwise(user) && !folded[user] &&
           same_shape(producer, user);
  };
  for (size_t r = n; r-- > 0;) {
    auto i = static_cast<uint32_t>(r);
    if (ir::is_leaf(graph.node(i).op)) continue;
    for (uint32_t u : users[i]) {
      level[i] = std::max(level[i], level[u] + (fusible(i, u) ? 0 : 1));
    }
  }

  UnionFind groups(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (!elementwise(i) || folded[i]) continue;
    for (int k = 0; k < graph.num_operands(i); ++k) {
      uint32_t p = graph.operand(i, k);
      if (elementwise(p) && !folded[p] && same_shape(p, i) && level[p] == level[i]) {
        groups.unite(p, i);
      }
    }
  }

  // Sibling fusion: groups of one shape and level that read the same value share a kernel, so
  // the value is read once. Rank-0 values (shared scalars) do not count: they would glue
  // together the updates of unrelated tensors. Merging groups of one level cannot make a
  // cycle, since every path between different groups lowers the level.
  for (uint32_t p = 0; p < n; ++p) {
    if (graph.node(p).shape.numel() <= 1) continue;
    std::unordered_map<int, uint32_t> first_user_at_level;
    for (uint32_t u : users[p]) {
      if (!elementwise(u) || folded[u] || !same_shape(p, u)) continue;
      auto [it, fresh] = first_user_at_level.emplace(level[u], u);
      if (!fresh) groups.unite(it->second, u);
    }
  }

  // Groups in topological order of their members, cut into chunks of at most max_ops ops:
  // a longer program compiles superlinearly (a 20,000-op kernel took minutes in g++). A
  // chunk reads only earlier chunks of its group, so chunking keeps the kernels acyclic.
  std::unordered_map<uint32_t, std::vector<uint32_t>> members;
  std::vector<uint32_t> group_order;
  for (uint32_t i = 0; i < n; ++i) {
    if (!elementwise(i) || folded[i]) continue;
    auto& list = members[groups.find(i)];
    if (list.empty()) group_order.push_back(groups.find(i));
    list.push_back(i);
  }
  constexpr uint32_t kNoChunk = ~uint32_t{0};
  std::vector<uint32_t> chunk_of(n, kNoChunk);
  std::vector<std::vector<uint32_t>> chunks;
  for (uint32_t root : group_order) {
    const auto& list = members[root];
    for (size_t begin = 0; begin < list.size(); begin += max_ops) {
      const size_t end = std::min(list.size(), begin + max_ops);
      for (size_t m = begin; m < end; ++m) chunk_of[list[m]] = static_cast<uint32_t>(chunks.size());
      chunks.emplace_back(list.begin() + begin, list.begin() + end);
    }
  }

  std::vector<Kernel> kernels;
  std::vector<uint32_t> first_node;  // for ordering kernels of one level
  for (uint32_t c = 0; c < chunks.size(); ++c) {
    const auto& list = chunks[c];
    Kernel kernel;
    kernel.iteration_shape = graph.node(list.front()).shape;
    kernel.level = level[list.front()];
    ProgramBuilder builder(graph, kernel);
    for (uint32_t i : list) builder.emit(i);
    for (uint32_t i : list) {
      bool needed_outside =
          is_output[i] || std::any_of(users[i].begin(), users[i].end(), [&](uint32_t u) {
            return folded[u] || !elementwise(u) || chunk_of[u] != c;
          });
      if (needed_outside) {
        kernel.program.outputs.push_back(builder.reg_for(i));
        kernel.output_nodes.push_back(i);
      }
    }
    first_node.push_back(list.front());
    kernels.push_back(std::move(kernel));
  }

  // Views that are graph outputs are copied out, contiguous.
  for (uint32_t i = 0; i < n; ++i) {
    if (!ir::is_view(graph.node(i).op) || !is_output[i]) continue;
    Kernel kernel;
    kernel.iteration_shape = graph.node(i).shape;
    kernel.level = level[i];
    ProgramBuilder builder(graph, kernel);
    kernel.program.outputs.push_back(builder.reg_for(i));
    kernel.output_nodes.push_back(i);
    first_node.push_back(i);
    kernels.push_back(std::move(kernel));
  }

  // Opaque ops, one kernel each.
  for (uint32_t i = 0; i < n; ++i) {
    if (!ir::is_opaque(graph.node(i).op)) continue;
    Kernel kernel;
    kernel.iteration_shape = graph.node(i).shape;
    kernel.level = level[i];
    kernel.opaque = i;
    for (int k = 0; k < graph.num_operands(i); ++k)
      kernel.input_nodes.push_back(graph.operand(i, k));
    kernel.output_nodes.push_back(i);
    first_node.push_back(i);
    kernels.push_back(std::move(kernel));
  }

  // Reduction kernels, each with its folded producers.
  for (uint32_t i = 0; i < n; ++i) {
    if (!reduction(i)) continue;
    const ir::Node& node = graph.node(i);
    const uint32_t operand = graph.operand(i, 0);
    Kernel kernel;
    kernel.iteration_shape = graph.node(operand).shape;
    kernel.reduce_mask = node.reduce_mask();
    kernel.level = level[i];
    kernel.program.reduce = reduce_kind(node.op);
    ProgramBuilder builder(graph, kernel);
    for (uint32_t p : folded_producers(i)) builder.emit(p);
    kernel.program.outputs.push_back(builder.reg_for(operand));
    kernel.output_nodes.push_back(i);
    first_node.push_back(i);
    kernels.push_back(std::move(kernel));
  }

  // A topological order: fusion levels from the outputs' farthest producers down, and by
  // first member within a level (chunks of one group follow each other).
  std::vector<size_t> order(kernels.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (kernels[a].level != kernels[b].level) return kernels[a].level > kernels[b].level;
    return first_node[a] < first_node[b];
  });
  // Execution levels: one more than the latest kernel a kernel reads from. Kernels of one
  // execution level are independent, so those with one program can share a launch.
  std::unordered_map<uint32_t, int> level_of_writer;
  std::vector<Kernel> sorted;
  sorted.reserve(kernels.size());
  for (size_t k : order) {
    Kernel& kernel = kernels[k];
    int exec_level = 0;
    for (uint32_t input : kernel.input_nodes) {
      auto it = level_of_writer.find(storage_node(graph, input));
      if (it != level_of_writer.end()) exec_level = std::max(exec_level, it->second + 1);
    }
    kernel.level = exec_level;
    for (uint32_t output : kernel.output_nodes) level_of_writer[output] = exec_level;
    sorted.push_back(std::move(kernel));
  }
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Kernel& a, const Kernel& b) { return a.level < b.level; });
  return sorted;
}

}  // namespace lt::compiler
