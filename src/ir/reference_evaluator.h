#pragma once
// The double-precision reference for tests: a step's graph evaluated op by op with the op
// table's reference definitions, sharing nothing with the compiler or the kernels. It reads no
// device memory: the caller hands it the leaves' values, so it is a pure function.
#include <vector>

#include "ir/graph.h"

namespace lt::ir {

// Evaluates `graph` given `input_values[j]`, the values of leaf `graph.inputs[j]` as stored
// (each element of its dtype converted exactly to double). Returns one vector per entry of
// `graph.outputs` (distinct, as graph.h has them), in that order. Walks the nodes in their
// topological order, without recursion, and keeps a node's values only until its last user has read
// them, so graphs of any length run in bounded stack and memory. Throws lt::Error when the input
// values do not match the graph's inputs.
std::vector<std::vector<double>> evaluate_graph(
    const Graph& graph, const std::vector<std::vector<double>>& input_values);

}  // namespace lt::ir
