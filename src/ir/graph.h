#pragma once
#include <cstdint>
#include <vector>

#include "ir/node.h"

namespace lt::ir {

// One step's computation, as handed to a backend's compiler. Nodes are in topological order
// (operands before users) and each node's visit_index is its position here.
struct Graph {
  std::vector<Node*> nodes;
  std::vector<uint32_t> outputs;  // node indices, distinct, in the order of the step's tensors
  std::vector<uint32_t> inputs;   // DeviceData leaves, in order of first use
  std::vector<uint32_t> scalars;  // Scalar leaves (kernel arguments), in order of first use
};

}  // namespace lt::ir
