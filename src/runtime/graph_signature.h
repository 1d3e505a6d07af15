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
// never scalar argument values or buffer identities. Equal signatures compile to the same
// executable.
struct GraphSignature {
  std::vector<uint64_t> words;
  uint64_t hash = 0;
};

// Walks the graph of `roots` in post-order (iteratively: chains of any length) and fills
// `graph` and `signature`. A node that is several roots becomes one output; `root_outputs`
// gets each root's output number.
void build_graph(const std::vector<const ir::Node*>& roots, uint64_t prefix, ir::Graph& graph,
                 GraphSignature& signature, std::vector<uint32_t>& root_outputs);

// What most likely changed and where `now` first differs from `cached`, in words a user can act
// on ("node 12 (Mul): shape changed from [2, 3] to [4, 3]"). `node` gets the index of that
// node in `now` (or of its last node, when one graph extends the other).
std::string describe_difference(const GraphSignature& now, const GraphSignature& cached,
                                size_t* node = nullptr);

}  // namespace lt::runtime
