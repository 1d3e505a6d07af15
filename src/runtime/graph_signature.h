#pragma once
// A step's graph and its structural signature, built by one walk over the IR.
#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace lt::runtime {

// A graph's structure, flattened: a prefix word (what the graph is compiled for), then one
// record per node in topological order, then the outputs. A record is a header (op, dtype,
// rank, operand count, attribute count), the dims, the operand positions and the attributes:
// never scalar argument values or buffer identities. Sizes (dims, and the attributes that
// ir::is_size_attr names) are symbolic: a dim of 0 or 1 is kept (broadcasting and empty values
// depend on it), and so is a view's stride of 0 (an expanded dim); any other size is the word
// kSymbolicSize and its value goes to `sizes`, as a scalar's value goes to the kernel
// arguments. Graphs of equal signatures compile once; a
// compiled graph then serves the sizes of each (backend::CompiledGraph::bind).
struct GraphSignature {
  std::vector<uint64_t> words;
  uint64_t hash = 0;
  std::vector<int64_t> sizes;  // the symbolic sizes' values, in the order of the words
  uint64_t sizes_hash = 0;
};

constexpr uint64_t kSymbolicSize = ~uint64_t{0} - 1;

// Walks the graph of `roots` in post-order (iteratively: chains of any length) and fills
// `graph` and `signature`. A node that is several roots becomes one output; `root_outputs`
// gets each root's output number. With `symbolic_sizes` false every size is a word of its own
// (a graph per sequence length).
void build_graph(const std::vector<const ir::Node*>& roots, uint64_t prefix, ir::Graph& graph,
                 GraphSignature& signature, std::vector<uint32_t>& root_outputs,
                 bool symbolic_sizes = true);

// What most likely changed and where `now` first differs from `cached`, in words a user can act
// on ("node 12 (Mul): shape changed from [2, 3] to [4, 3]"). `node` gets the index of that
// node in `now` (or of its last node, when one graph extends the other).
std::string describe_difference(const GraphSignature& now, const GraphSignature& cached,
                                size_t* node = nullptr);

}  // namespace lt::runtime
