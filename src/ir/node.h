#pragma once
#include <array>
#include <cstdint>
#include <memory>

#include "ir/ops.h"
#include "lazytensor/dtype.h"
#include "lazytensor/shape.h"

namespace lt::runtime {
struct DeviceData;
}

namespace lt::ir {

struct Node;
using NodePtr = std::shared_ptr<Node>;

// An immutable IR node. Its shape and dtype are inferred when it is traced. Operands are
// broadcast to the node's shape (elementwise ops) or reduced (reductions).
struct Node {
  OpKind op;
  DType dtype;
  Shape shape;
  uint8_t num_operands = 0;
  bool keepdim = false;      // reductions
  uint32_t reduce_mask = 0;  // reductions: bit d set = operand dim d is reduced
  double value = 0;          // Scalar and Constant
  std::array<NodePtr, 3> operands;
  std::shared_ptr<runtime::DeviceData> data;  // DeviceData

  // Traversal scratch, owned by the graph executor (host thread only).
  uint64_t visit_epoch = 0;
  uint32_t visit_index = 0;

  const Node& operand(int i) const { return *operands[i]; }
};

NodePtr make_node(OpKind op, DType dtype, const Shape& shape,
                  std::initializer_list<NodePtr> operands);
NodePtr make_scalar_node(OpKind op, DType dtype, double value);  // Scalar or Constant
NodePtr make_reduction(OpKind op, const NodePtr& operand, uint32_t reduce_mask, bool keepdim,
                       const Shape& shape);

}  // namespace lt::ir
