#include "ir/node.h"

#include <algorithm>
#include <atomic>
#include <bit>

#include "ir/dtype_traits.h"
#include "metrics/metrics_registry.h"

namespace lt::ir {

namespace {

// Live nodes, counted per thread and added to the process-wide count in batches: a locked
// add per node would cost every traced op more than the rest of the bookkeeping.
std::atomic<int64_t> g_live_nodes{0};
thread_local int64_t t_unflushed_nodes = 0;
constexpr int64_t kFlushEvery = 64;

void count_nodes(int64_t delta) {
  t_unflushed_nodes += delta;
  if (t_unflushed_nodes >= kFlushEvery || t_unflushed_nodes <= -kFlushEvery) {
    g_live_nodes.fetch_add(t_unflushed_nodes, std::memory_order_relaxed);
    t_unflushed_nodes = 0;
  }
}

// While a node release is being drained on this thread, where nested releases put the
// operands they would otherwise release recursively. A plain pointer: it must stay usable
// while thread-local and static objects are destroyed at exit.
thread_local InlineVector<NodePtr, 16>* t_release_queue = nullptr;

// Serials in blocks per thread: one shared atomic add per 4096 nodes, not per node.
std::atomic<uint64_t> g_next_serial_block{1};
thread_local uint64_t t_next_serial = 0, t_serial_end = 0;
constexpr uint64_t kSerialBlock = 4096;

uint64_t next_serial() {
  const uint64_t serial = upcoming_serial();
  ++t_next_serial;
  return serial;
}

}  // namespace

Node::Node(OpKind op_kind, DType type, const Shape& result_shape)
    : op(op_kind), dtype(type), shape(result_shape), serial(next_serial()) {
  count_nodes(1);
}

Node::~Node() {
  count_nodes(-1);
  if (t_release_queue) {
    while (!operands.empty()) t_release_queue->push_back(operands.pop_back());
    return;
  }
  // Releasing the operands recurses at most `depth` frames: few enough to let it happen.
  constexpr uint32_t kMaxRecursion = 256;
  if (depth <= kMaxRecursion) return;
  InlineVector<NodePtr, 16> queue;
  t_release_queue = &queue;
  while (!operands.empty()) queue.push_back(operands.pop_back());
  while (!queue.empty()) queue.pop_back();  // a dying node appends its operands to the queue
  t_release_queue = nullptr;
}

namespace {

template <class Operands, class Attrs>
NodePtr build_node(OpKind op, DType dtype, const Shape& shape, const Operands& operands,
                   const Attrs& attrs) {
  static metrics::Counter& traced = metrics::counter("TracedOps");
  if (op != OpKind::DeviceData) traced.add();
  auto node = std::make_shared<Node>(op, dtype, shape);
  uint32_t depth = 0;
  for (const NodePtr& operand : operands) {
    depth = std::max(depth, operand->depth + 1);
    if (!node->device) node->device = operand->device;
    node->operands.push_back(operand);
  }
  node->depth = depth;
  for (int64_t attr : attrs) node->attrs.push_back(attr);
  return node;
}

}  // namespace

NodePtr make_node(OpKind op, DType dtype, const Shape& shape,
                  std::initializer_list<NodePtr> operands, std::initializer_list<int64_t> attrs) {
  return build_node(op, dtype, shape, operands, attrs);
}

NodePtr make_node(OpKind op, DType dtype, const Shape& shape, const std::vector<NodePtr>& operands,
                  const std::vector<int64_t>& attrs) {
  return build_node(op, dtype, shape, operands, attrs);
}

double scalar_value(DType dtype, double value) {
  if (!dtype_info(dtype).wide_register) return value;
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Through the register type first, as a kernel given the number as an argument converts it
    // (PyTorch's fill of a bf16 tensor rounds the same way: to f32, then to bf16).
    value =
        static_cast<double>(load_element(convert_element<T>(static_cast<RegisterOf<T>>(value))));
  });
  return value;
}

NodePtr make_scalar_node(OpKind op, DType dtype, double value) {
  auto node = std::make_shared<Node>(op, dtype, Shape());
  value = scalar_value(dtype, value);
  node->value = value;
  // A constant is baked into the program, so its value is part of the graph's structure.
  if (op == OpKind::Constant) node->attrs.push_back(std::bit_cast<int64_t>(value));
  return node;
}

NodePtr make_reduction(OpKind op, const NodePtr& operand, uint32_t reduce_mask, bool keepdim,
                       const Shape& shape) {
  return make_node(op, operand->dtype, shape, {operand}, {reduce_mask, keepdim ? 1 : 0});
}

uint64_t upcoming_serial() {
  if (t_next_serial == t_serial_end) {
    t_next_serial = g_next_serial_block.fetch_add(1, std::memory_order_relaxed) * kSerialBlock;
    t_serial_end = t_next_serial + kSerialBlock;
  }
  return t_next_serial;
}

int64_t live_nodes() {
  return g_live_nodes.load(std::memory_order_relaxed) + t_unflushed_nodes;
}

}  // namespace lt::ir
