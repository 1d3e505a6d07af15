#include "backend/opaque_op.h"

#include <string>

#include "compiler/fusion.h"
#include "lazytensor/error.h"

namespace lt::backend {

void throw_index_out_of_range(const char* op, int dim, int64_t size, int64_t id, int64_t position,
                              std::optional<int64_t> ignore) {
  if (ignore) {
    throw IndexError(std::string(op) + ": target " + std::to_string(id) + " at position " +
                     std::to_string(position) + " is out of range for " + std::to_string(size) +
                     " classes (valid: 0 to " + std::to_string(size - 1) +
                     ", or the ignore_index " + std::to_string(*ignore) + ")");
  }
  throw IndexError(std::string(op) + ": index " + std::to_string(id) + " at position " +
                   std::to_string(position) + " is out of range for dim " + std::to_string(dim) +
                   " of size " + std::to_string(size) + " (valid: 0 to " +
                   std::to_string(size - 1) + ")");
}

bool is_contiguous(const StridedOperand& x) {
  int64_t expected = 1;
  for (int d = x.shape.rank() - 1; d >= 0; --d) {
    if (x.shape[d] != 1 && x.strides[d] != expected) return false;
    expected *= x.shape[d];
  }
  return true;
}

IndexGeometry geometry(const Shape& table, int dim) {
  IndexGeometry g;
  g.dim = dim;
  for (int d = 0; d < dim; ++d) g.outer *= table[d];
  g.rows = table[dim];
  for (int d = dim + 1; d < table.rank(); ++d) g.inner *= table[d];
  return g;
}

Rows rows_of(const Shape& shape) {
  const int64_t n = shape.rank() == 0 ? 1 : shape[shape.rank() - 1];
  return {n == 0 ? 0 : shape.numel() / n, n};
}

void contiguous_strides(const Shape& shape, int64_t* strides) {
  for (int64_t d = shape.rank() - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
}

OpaqueOp make_opaque_op(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                        const compiler::Kernel& kernel) {
  const ir::Node& node = graph.node(static_cast<uint32_t>(kernel.opaque));
  OpaqueOp op;
  op.op = node.op;
  for (uint32_t input : kernel.input_nodes) {
    const ir::Node& value = graph.node(input);
    StridedOperand operand;
    operand.slot = plan.slot_of[compiler::storage_node(graph, input)];
    operand.dtype = value.dtype;
    operand.shape = value.shape;
    if (ir::is_view(value.op)) {
      operand.offset = value.view_offset();
      for (int d = 0; d < value.shape.rank(); ++d) operand.strides[d] = value.view_stride(d);
    } else {
      contiguous_strides(value.shape, operand.strides);
    }
    op.operands.push_back(operand);
  }
  op.output_slot = plan.slot_of[kernel.output_nodes[0]];
  op.output_shape = node.shape;
  op.output_dtype = node.dtype;
  for (size_t a = 0; a < node.attrs.size(); ++a) op.attrs.push_back(node.attrs[a]);
  return op;
}

}  // namespace lt::backend
