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

// One partition's work, phase by phase: which elementwise nodes fold into reductions, the
// fusion levels, the groups of nodes that share a kernel and their chunks, then the kernels
// (elementwise chunks, view copies, opaque ops, reductions) in execution order.
class Partitioner {
 public:
  Partitioner(const ir::Graph& graph, const FusionOptions& options)
      : graph_(graph),
        n_(graph.nodes.size()),
        max_ops_(std::max<size_t>(1, options.max_kernel_ops)),
        users_(n_),
        is_output_(n_, 0),
        folded_(n_, 0),
        level_(n_, 0) {
    for (uint32_t i = 0; i < n_; ++i) {
      for (int k = 0; k < graph.num_operands(i); ++k) users_[graph.operand(i, k)].push_back(i);
    }
    for (uint32_t out : graph.outputs) is_output_[out] = 1;
  }

  std::vector<Kernel> run() {
    fold_into_reductions();
    assign_levels();
    chunk_groups(group_elementwise());
    elementwise_kernels();
    view_copy_kernels();
    opaque_kernels();
    reduction_kernels();
    return in_execution_order();
  }

 private:
  bool elementwise(uint32_t i) const { return ir::is_elementwise(graph_.node(i).op); }
  bool reduction(uint32_t i) const { return ir::is_reduction(graph_.node(i).op); }
  // Asked only of a node and an elementwise user of it, whose shapes agree exactly when their
  // ranks and dims of 1 do: fusion decides nothing that the graph's signature does not say.
  bool same_shape(uint32_t a, uint32_t b) const {
    return graph_.node(a).shape == graph_.node(b).shape;
  }

  // Elementwise nodes read only by reductions (directly or through other such nodes of the
  // same shape) are recomputed inside the reductions instead of being written out, unless
  // that would make a reduction's program longer than max_ops: then they are materialized.
  void fold_into_reductions() {
    // An Iota's values (and the random bits of a stochastic rounding or a Bernoulli draw) are
    // functions of positions in its kernel's iteration space, which a reduction walks in
    // another order: never folded.
    std::vector<char> unfoldable(n_, 0);
    for (uint32_t i = 0; i < n_; ++i) {
      const ir::OpKind op = graph_.node(i).op;
      unfoldable[i] = op == ir::OpKind::Iota || op == ir::OpKind::StochasticRound ||
                      op == ir::OpKind::Bernoulli;
    }
    fold(unfoldable);
    bool refold = false;
    for (uint32_t i = 0; i < n_; ++i) {
      if (!reduction(i)) continue;
      const std::vector<uint32_t> producers = folded_producers(i);
      if (producers.size() <= max_ops_) continue;
      for (uint32_t p : producers) unfoldable[p] = 1;
      refold = true;
    }
    if (refold) fold(unfoldable);  // unfolding only shrinks the other reductions' producer sets
  }

  void fold(const std::vector<char>& unfoldable) {
    for (size_t r = n_; r-- > 0;) {
      auto i = static_cast<uint32_t>(r);
      folded_[i] = 0;
      if (!elementwise(i) || is_output_[i] || users_[i].empty() || unfoldable[i]) continue;
      folded_[i] = std::all_of(users_[i].begin(), users_[i].end(), [&](uint32_t u) {
        return reduction(u) || (folded_[u] && same_shape(i, u));
      });
    }
  }

  // The folded producers of reduction i, in topological order.
  std::vector<uint32_t> folded_producers(uint32_t i) const {
    const uint32_t operand = graph_.operand(i, 0);
    std::vector<uint32_t> producers;
    std::vector<uint32_t> stack;
    if (folded_[operand]) stack.push_back(operand);
    std::unordered_map<uint32_t, char> seen;
    while (!stack.empty()) {
      uint32_t p = stack.back();
      stack.pop_back();
      if (!seen.emplace(p, 1).second) continue;
      producers.push_back(p);
      for (int k = 0; k < graph_.num_operands(p); ++k) {
        uint32_t q = graph_.operand(p, k);
        if (folded_[q] && same_shape(p, q)) stack.push_back(q);
      }
    }
    std::sort(producers.begin(), producers.end());
    return producers;
  }

  // Levels, assigned from the outputs backwards: a fusible edge keeps the level, an edge that
  // needs the producer in memory raises it by one.
  void assign_levels() {
    auto fusible = [&](uint32_t producer, uint32_t user) {
      if (ir::is_view(graph_.node(producer).op)) return true;  // read in place by its user
      if (folded_[producer]) return true;  // all its users are reductions or folded nodes
      return elementwise(producer) && elementwise(user) && !folded_[user] &&
             same_shape(producer, user);
    };
    for (size_t r = n_; r-- > 0;) {
      auto i = static_cast<uint32_t>(r);
      if (ir::is_leaf(graph_.node(i).op)) continue;
      for (uint32_t u : users_[i]) {
        level_[i] = std::max(level_[i], level_[u] + (fusible(i, u) ? 0 : 1));
      }
      raise_narrowing_casts(i, fusible);
    }
  }

  // A narrowing cast of value i that a later kernel reads (GELU's input kept in bf16 for the
  // backward pass) joins the kernel computing i when nothing else outside that kernel reads i:
  // the kernel then stores the narrow value instead of the wide one, which the later kernel
  // would read only to cast it. Raising the cast's level keeps every edge's rule (its users
  // stay below it), and it takes i's group since the edge between them is fusible.
  template <class Fusible>
  void raise_narrowing_casts(uint32_t i, const Fusible& fusible) {
    if (is_output_[i] || !elementwise(i) || folded_[i]) return;
    const size_t wide = dtype_size(graph_.node(i).dtype);
    const auto narrowing = [&](uint32_t u) {
      const ir::Node& node = graph_.node(u);
      return node.op == ir::OpKind::Cast && !folded_[u] && same_shape(i, u) &&
             dtype_size(node.dtype) < wide;
    };
    std::vector<uint32_t> casts;
    for (uint32_t u : users_[i]) {
      if (narrowing(u)) {
        if (level_[u] < level_[i]) casts.push_back(u);
      } else if (level_[u] != level_[i] || !fusible(i, u)) {
        return;  // read outside i's kernel: i is stored anyway
      }
    }
    for (uint32_t c : casts) level_[c] = level_[i];
  }

  // Elementwise nodes of one shape and level that feed each other share a kernel (vertical
  // fusion), and so do groups of one shape and level that read the same value (sibling
  // fusion), so the value is read once. Rank-0 values (shared scalars) do not count: they would
  // glue together the updates of unrelated tensors. Merging groups of one level cannot make a
  // cycle, since every path between different groups lowers the level.
  UnionFind group_elementwise() const {
    UnionFind groups(n_);
    for (uint32_t i = 0; i < n_; ++i) {
      if (!elementwise(i) || folded_[i]) continue;
      for (int k = 0; k < graph_.num_operands(i); ++k) {
        uint32_t p = graph_.operand(i, k);
        if (elementwise(p) && !folded_[p] && same_shape(p, i) && level_[p] == level_[i]) {
          groups.unite(p, i);
        }
      }
    }
    for (uint32_t p = 0; p < n_; ++p) {
      if (graph_.node(p).shape.numel() <= 1) continue;
      std::unordered_map<int, uint32_t> first_user_at_level;
      for (uint32_t u : users_[p]) {
        if (!elementwise(u) || folded_[u] || !same_shape(p, u)) continue;
        auto [it, fresh] = first_user_at_level.emplace(level_[u], u);
        if (!fresh) groups.unite(it->second, u);
      }
    }
    return groups;
  }

  // Groups in topological order of their members, cut into chunks of at most max_ops ops:
  // a longer program compiles superlinearly (a 20,000-op kernel took minutes in g++). A
  // chunk reads only earlier chunks of its group, so chunking keeps the kernels acyclic.
  void chunk_groups(UnionFind groups) {
    std::unordered_map<uint32_t, std::vector<uint32_t>> members;
    std::vector<uint32_t> group_order;
    for (uint32_t i = 0; i < n_; ++i) {
      if (!elementwise(i) || folded_[i]) continue;
      auto& list = members[groups.find(i)];
      if (list.empty()) group_order.push_back(groups.find(i));
      list.push_back(i);
    }
    chunk_of_.assign(n_, kNoChunk);
    for (uint32_t root : group_order) {
      const auto& list = members[root];
      for (size_t begin = 0; begin < list.size(); begin += max_ops_) {
        const size_t end = std::min(list.size(), begin + max_ops_);
        for (size_t m = begin; m < end; ++m) {
          chunk_of_[list[m]] = static_cast<uint32_t>(chunks_.size());
        }
        chunks_.emplace_back(list.begin() + begin, list.begin() + end);
      }
    }
  }

  // One kernel per chunk; it writes the values needed outside it.
  void elementwise_kernels() {
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
      const auto& list = chunks_[c];
      Kernel kernel;
      kernel.shape_node = list.front();
      kernel.level = level_[list.front()];
      ProgramBuilder builder(graph_, kernel);
      for (uint32_t i : list) builder.emit(i);
      for (uint32_t i : list) {
        bool needed_outside =
            is_output_[i] || std::any_of(users_[i].begin(), users_[i].end(), [&](uint32_t u) {
              return folded_[u] || !elementwise(u) || chunk_of_[u] != c;
            });
        if (needed_outside) {
          kernel.program.outputs.push_back(builder.reg_for(i));
          kernel.output_nodes.push_back(i);
        }
      }
      add(std::move(kernel), list.front());
    }
  }

  // Views that are graph outputs are copied out, contiguous.
  void view_copy_kernels() {
    for (uint32_t i = 0; i < n_; ++i) {
      if (!ir::is_view(graph_.node(i).op) || !is_output_[i]) continue;
      Kernel kernel;
      kernel.shape_node = i;
      kernel.level = level_[i];
      ProgramBuilder builder(graph_, kernel);
      kernel.program.outputs.push_back(builder.reg_for(i));
      kernel.output_nodes.push_back(i);
      add(std::move(kernel), i);
    }
  }

  // Opaque ops, one kernel each.
  void opaque_kernels() {
    for (uint32_t i = 0; i < n_; ++i) {
      if (!ir::is_opaque(graph_.node(i).op)) continue;
      Kernel kernel;
      kernel.shape_node = i;
      kernel.level = level_[i];
      kernel.opaque = i;
      for (int k = 0; k < graph_.num_operands(i); ++k) {
        kernel.input_nodes.push_back(graph_.operand(i, k));
      }
      kernel.output_nodes.push_back(i);
      add(std::move(kernel), i);
    }
  }

  // Reduction kernels, each with its folded producers.
  void reduction_kernels() {
    for (uint32_t i = 0; i < n_; ++i) {
      if (!reduction(i)) continue;
      const ir::Node& node = graph_.node(i);
      const uint32_t operand = graph_.operand(i, 0);
      Kernel kernel;
      kernel.shape_node = operand;
      kernel.reduce_mask = node.reduce_mask();
      kernel.level = level_[i];
      kernel.program.reduce = reduce_kind(node.op);
      ProgramBuilder builder(graph_, kernel);
      for (uint32_t p : folded_producers(i)) builder.emit(p);
      kernel.program.outputs.push_back(builder.reg_for(operand));
      kernel.output_nodes.push_back(i);
      add(std::move(kernel), i);
    }
  }

  void add(Kernel kernel, uint32_t first_node) {
    kernels_.push_back(std::move(kernel));
    first_node_.push_back(first_node);
  }

  // A topological order: fusion levels from the outputs' farthest producers down, and by
  // first member within a level (chunks of one group follow each other). Then execution
  // levels: one more than the latest kernel a kernel reads from. Kernels of one execution
  // level are independent, so those with one program can share a launch.
  std::vector<Kernel> in_execution_order() {
    std::vector<size_t> order(kernels_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (kernels_[a].level != kernels_[b].level) return kernels_[a].level > kernels_[b].level;
      return first_node_[a] < first_node_[b];
    });
    std::unordered_map<uint32_t, int> level_of_writer;
    std::vector<Kernel> sorted;
    sorted.reserve(kernels_.size());
    for (size_t k : order) {
      Kernel& kernel = kernels_[k];
      int exec_level = 0;
      for (uint32_t input : kernel.input_nodes) {
        auto it = level_of_writer.find(storage_node(graph_, input));
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

  static constexpr uint32_t kNoChunk = ~uint32_t{0};

  const ir::Graph& graph_;
  const size_t n_;
  const size_t max_ops_;
  std::vector<std::vector<uint32_t>> users_;
  std::vector<char> is_output_;
  std::vector<char> folded_;
  std::vector<int> level_;  // fusion levels until in_execution_order
  std::vector<uint32_t> chunk_of_;
  std::vector<std::vector<uint32_t>> chunks_;
  std::vector<Kernel> kernels_;
  std::vector<uint32_t> first_node_;  // for ordering kernels of one level
};

}  // namespace

std::vector<Kernel> partition(const ir::Graph& graph, const FusionOptions& options) {
  return Partitioner(graph, options).run();
}

}  // namespace lt::compiler
