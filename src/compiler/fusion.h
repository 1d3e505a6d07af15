#pragma once
#include <cstdint>
#include <vector>

#include "compiler/kernel_program.h"
#include "ir/graph.h"

namespace lt::compiler {

// One fused kernel of a graph: elementwise (any number of outputs, all of one shape) or a
// reduction (one output) whose elementwise producers are folded into its program.
struct Kernel {
  KernelProgram program;
  // The graph node whose shape is the iteration space: elementwise, an output; reduction, its
  // operand. A node, not a shape: one plan serves graphs of every size (size_assumptions.h).
  uint32_t shape_node = 0;
  uint32_t reduce_mask = 0;            // reduction: the reduced dims of the iteration space
  std::vector<uint32_t> input_nodes;   // graph node read by each program input
  std::vector<uint32_t> output_nodes;  // graph node written by each program output
  std::vector<uint32_t> scalar_nodes;  // Scalar leaf passed as each scalar argument
  int level = 0;  // kernels of one level are independent; levels run in increasing order
  // An opaque op (matmul, gather, ...): the graph node the backend runs with its own routine.
  // Its program is empty; input_nodes are the node's operands, output_nodes the node.
  int64_t opaque = -1;
};

inline const Shape& iteration_shape(const ir::Graph& graph, const Kernel& kernel) {
  return graph.node(kernel.shape_node).shape;
}

// The node a kernel reads for input node `index`: a view's operand (read through the view's
// strides), else the node itself.
inline uint32_t storage_node(const ir::Graph& graph, uint32_t index) {
  return ir::is_view(graph.node(index).op) ? graph.operand(index, 0) : index;
}

struct FusionOptions {
  size_t max_kernel_ops = 512;  // longer programs are cut into several kernels
  bool row_groups = true;       // mark row groups (ExecutionPlan) for row-blocked runs
};

// Splits a graph into fused kernels, returned in an order that respects their dependencies
// (sorted by level).
//
// Vertical fusion: elementwise nodes of one shape that feed each other share a kernel, and
// only nodes needed outside it (graph outputs, inputs of other kernels) reach memory.
// Elementwise nodes whose only users are reductions are folded into the reductions.
// A node is materialized when a user broadcasts it or when it feeds a kernel across a
// reduction, a view or an opaque op. Views are never materialized (kernels read their
// operand through the view's strides) unless they are graph outputs; opaque ops are kernels
// of their own. Cycles between kernels are impossible by construction: every node gets a
// level (the longest distance, in materializations, to a graph output) and only nodes of
// equal level fuse, while every edge between kernels strictly lowers the level. A program is
// never longer than options.max_kernel_ops ops: longer chains are cut into several kernels.
std::vector<Kernel> partition(const ir::Graph& graph, const FusionOptions& options);

}  // namespace lt::compiler
