#pragma once
// What a plan's decisions assumed of a graph's sizes beyond its signature.
//
// A graph's signature keeps its structure and which dims are 0 or 1, never the other sizes
// (runtime/graph_signature.h), so one plan serves every sequence length. Fusion needs nothing
// more: an elementwise node's operand has its shape exactly when their ranks and dims of 1
// agree. The execution plan compares sizes of unrelated values too (whether a temporary can
// take over another's buffer, whether a launch iterates a row group's rows, whether a view
// reads its storage in order); it asks them here, which records each question answered yes.
// Every yes allows something (a shared buffer, a launch inside a row group) and every no only
// keeps the plan from it, which is as valid at any size: a plan holds for another graph of its
// signature when every recorded question is answered yes there too.
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ir/graph.h"

namespace lt::compiler {

class SizeAssumptions {
 public:
  // Whether nodes a and b have as many elements.
  bool same_numel(const ir::Graph& graph, uint32_t a, uint32_t b);
  // Whether the first `count` dims of nodes a and b agree (both have at least that many).
  bool same_leading_dims(const ir::Graph& graph, uint32_t a, uint32_t b, int count);
  // Whether node reads its storage element for element: no view, or a view of all of its
  // storage with contiguous strides (a reshape).
  bool reads_storage_in_order(const ir::Graph& graph, uint32_t node);

  // Whether every question answered yes is answered yes in `graph` too; if not, `why` says
  // which one is not (in graph's sizes).
  bool hold_for(const ir::Graph& graph, std::string* why = nullptr) const;
  size_t size() const { return facts_.size(); }
  // Forgets the answers recorded since size() was `mark`: the plan asked, then took nothing
  // from them (a launch that did not join a row group after all).
  void forget_since(size_t mark);

 private:
  enum class Kind : uint8_t { SameNumel, SameLeadingDims, ReadsInOrder };
  struct Fact {
    Kind kind;
    uint8_t count;
    uint32_t a, b;
  };
  static bool evaluate(const ir::Graph& graph, const Fact& fact);
  bool record(const ir::Graph& graph, Fact fact);

  using Key = std::tuple<Kind, uint8_t, uint32_t, uint32_t>;
  static Key key(const Fact& fact) { return {fact.kind, fact.count, fact.a, fact.b}; }
  std::vector<Fact> facts_;
  std::set<Key> asked_;
};

}  // namespace lt::compiler
