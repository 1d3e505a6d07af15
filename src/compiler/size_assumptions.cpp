#include "compiler/size_assumptions.h"

#include <algorithm>

namespace lt::compiler {

bool SizeAssumptions::evaluate(const ir::Graph& graph, const Fact& fact) {
  const ir::Node& a = graph.node(fact.a);
  switch (fact.kind) {
    case Kind::SameNumel:
      return a.shape.numel() == graph.node(fact.b).shape.numel();
    case Kind::SameLeadingDims: {
      const Shape& b = graph.node(fact.b).shape;
      return a.shape.rank() >= fact.count && b.rank() >= fact.count &&
             std::equal(a.shape.begin(), a.shape.begin() + fact.count, b.begin());
    }
    case Kind::ReadsInOrder: {
      if (!ir::is_view(a.op)) return true;
      if (a.view_offset() != 0 ||
          a.shape.numel() != graph.node(graph.operand(fact.a, 0)).shape.numel()) {
        return false;
      }
      int64_t stride = 1;
      for (int d = a.shape.rank() - 1; d >= 0; --d) {
        if (a.shape[d] != 1 && a.view_stride(d) != stride) return false;
        stride *= a.shape[d];
      }
      return true;
    }
  }
  return false;
}

bool SizeAssumptions::record(const ir::Graph& graph, Fact fact) {
  if (!evaluate(graph, fact)) return false;
  if (asked_.insert(key(fact)).second) facts_.push_back(fact);
  return true;
}

void SizeAssumptions::forget_since(size_t mark) {
  while (facts_.size() > mark) {
    asked_.erase(key(facts_.back()));
    facts_.pop_back();
  }
}

bool SizeAssumptions::same_numel(const ir::Graph& graph, uint32_t a, uint32_t b) {
  if (a == b) return true;
  return record(graph, {Kind::SameNumel, 0, std::min(a, b), std::max(a, b)});
}

bool SizeAssumptions::same_leading_dims(const ir::Graph& graph, uint32_t a, uint32_t b, int count) {
  return record(
      graph, {Kind::SameLeadingDims, static_cast<uint8_t>(count), std::min(a, b), std::max(a, b)});
}

bool SizeAssumptions::reads_storage_in_order(const ir::Graph& graph, uint32_t node) {
  if (!ir::is_view(graph.node(node).op)) return true;
  return record(graph, {Kind::ReadsInOrder, 0, node, 0});
}

bool SizeAssumptions::hold_for(const ir::Graph& graph, std::string* why) const {
  for (const Fact& fact : facts_) {
    if (evaluate(graph, fact)) continue;
    if (why) {
      const std::string a = "node " + std::to_string(fact.a) + " " + graph.node(fact.a).shape.str();
      const std::string b = "node " + std::to_string(fact.b) + " " + graph.node(fact.b).shape.str();
      switch (fact.kind) {
        case Kind::SameNumel:
          *why = a + " no longer has as many elements as " + b;
          break;
        case Kind::SameLeadingDims:
          *why = "the first " + std::to_string(fact.count) + " dims of " + a +
                 " no longer agree with " + b;
          break;
        case Kind::ReadsInOrder:
          *why = a + " is a view that no longer reads all of its storage in order";
          break;
      }
    }
    return false;
  }
  return true;
}

}  // namespace lt::compiler
