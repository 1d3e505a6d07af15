#include "ir/node.h"

#include "metrics/metrics_registry.h"

namespace lt::ir {

NodePtr make_node(OpKind op, DType dtype, const Shape& shape,
                  std::initializer_list<NodePtr> operands) {
  static metrics::Counter& traced = metrics::counter("TracedOps");
  if (op != OpKind::DeviceData) traced.add();
  auto node = std::make_shared<Node>();
  node->op = op;
  node->dtype = dtype;
  node->shape = shape;
  for (const NodePtr& operand : operands) node->operands[node->num_operands++] = operand;
  return node;
}

NodePtr make_scalar_node(OpKind op, DType dtype, double value) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->dtype = dtype;
  node->value = value;
  return node;
}

NodePtr make_reduction(OpKind op, const NodePtr& operand, uint32_t reduce_mask, bool keepdim,
                       const Shape& shape) {
  auto node = make_node(op, operand->dtype, shape, {operand});
  node->reduce_mask = reduce_mask;
  node->keepdim = keepdim;
  return node;
}

}  // namespace lt::ir
