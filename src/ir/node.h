#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "ir/inline_vector.h"
#include "ir/ops.h"
#include "lazytensor/device.h"
#include "lazytensor/dtype.h"
#include "lazytensor/shape.h"

namespace lt::runtime {
struct DeviceData;
}

namespace lt::ir {

struct Node;
using NodePtr = std::shared_ptr<Node>;

// An immutable IR node: op, operands, result shape and dtype, and structural attributes.
// Every op fits this one record. Operands are broadcast to the node's shape (elementwise ops)
// or reduced (reductions); what an attribute means is the op's business (a reduction's dims,
// a constant's bits, later a permutation or a seed), and all of them are part of the graph's
// structure. A Scalar's value is not: it travels as a kernel argument.
struct Node {
  Node(OpKind op, DType dtype, const Shape& shape);
  // Releases the operand chain with a loop, not recursion: a chain of a million traced ops
  // must not overflow the stack when its last tensor dies.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  OpKind op;
  DType dtype;
  Shape shape;
  InlineVector<NodePtr, 3> operands;
  InlineVector<int64_t, 2> attrs;
  double value = 0;                           // Scalar and Constant
  std::shared_ptr<runtime::DeviceData> data;  // DeviceData
  uint32_t depth = 0;                         // ops on the longest path down to a leaf
  // Unique for the process's life (a freed node's address is not): lets the executor tell
  // that a graph runs ops an earlier one ran.
  uint64_t serial = 0;
  // Where the value is computed: that of the operands, or of the device data. Numbers
  // (Scalar, Constant) have none: they go to whichever device uses them.
  std::optional<Device> device;

  int num_operands() const { return static_cast<int>(operands.size()); }
  const Node& operand(int i) const { return *operands[i]; }
  // Reductions: bit d of the mask set = operand dim d is reduced.
  uint32_t reduce_mask() const { return static_cast<uint32_t>(attrs[0]); }
  bool keepdim() const { return attrs[1] != 0; }
  // Views: where element 0 sits in the operand's storage, and each dim's stride there.
  int64_t view_offset() const { return attrs[0]; }
  int64_t view_stride(int d) const { return attrs[1 + d]; }
};

NodePtr make_node(OpKind op, DType dtype, const Shape& shape,
                  std::initializer_list<NodePtr> operands,
                  std::initializer_list<int64_t> attrs = {});
NodePtr make_node(OpKind op, DType dtype, const Shape& shape, const std::vector<NodePtr>& operands,
                  const std::vector<int64_t>& attrs);
// A number as a scalar of an op of `dtype` holds it: rounded to bf16 or f16 (through f32) for
// those dtypes, as PyTorch casts a Python number to the tensor's dtype; unchanged otherwise.
double scalar_value(DType dtype, double value);
NodePtr make_scalar_node(OpKind op, DType dtype, double value);  // Scalar or Constant
NodePtr make_reduction(OpKind op, const NodePtr& operand, uint32_t reduce_mask, bool keepdim,
                       const Shape& shape);

// IR nodes alive in the process (a graph nobody cuts grows this): exact for this thread's
// changes, within 64 a thread for other threads'.
int64_t live_nodes();

// The serial the next node made on this thread gets (tracing notes where its ops begin).
uint64_t upcoming_serial();

}  // namespace lt::ir
