#pragma once
#include <cstdint>
#include <vector>

#include "ir/node.h"

namespace lt::ir {

// One step's computation, as handed to a backend's compiler: self-contained, so passes read
// operand positions here and never keep scratch state on the (shared, immutable) nodes.
// Nodes are in topological order (operands before users).
struct Graph {
  std::vector<const Node*> nodes;
  std::vector<uint32_t> operand_begin;  // node i's operands: operand_ids[begin[i], begin[i+1])
  std::vector<uint32_t> operand_ids;
  std::vector<uint32_t> outputs;  // node indices, distinct, in the order of the step's tensors
  std::vector<uint32_t> inputs;   // DeviceData leaves, in order of first use
  std::vector<uint32_t> scalars;  // Scalar leaves (kernel arguments), in order of first use

  const Node& node(uint32_t i) const { return *nodes[i]; }
  int num_operands(uint32_t i) const {
    return static_cast<int>(operand_begin[i + 1] - operand_begin[i]);
  }
  // The position of node i's k-th operand.
  uint32_t operand(uint32_t i, int k) const { return operand_ids[operand_begin[i] + k]; }
};

}  // namespace lt::ir
