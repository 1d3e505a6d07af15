#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "runtime/graph_signature.h"

namespace lt::runtime {

// A bounded LRU map from graph signature to compiled graph, each with the executables bound
// to the sizes it ran with lately. A hit requires the whole signature to be equal, never the
// hash alone, and the compiled graph's assumptions to hold for the sizes; a signature can
// have several compiled graphs when sizes broke an earlier one's assumptions.
class CompileCache {
 public:
  // The executable for `graph` (of `signature`): one bound to its sizes before, or bound now
  // (counted as SizeBind, timed as BindTime). Null when no compiled graph of the signature
  // serves these sizes: `why_not` then says what the sizes break, or stays empty when the
  // signature has no compiled graph.
  std::shared_ptr<backend::Executable> find(const GraphSignature& signature, const ir::Graph& graph,
                                            std::string& why_not);
  void insert(const GraphSignature& signature, std::shared_ptr<backend::CompiledGraph> compiled,
              std::shared_ptr<backend::Executable> executable);
  size_t size() const { return lru_.size(); }
  void clear() {
    by_hash_.clear();
    lru_.clear();
  }
  // The cached signature closest to `signature` (longest common prefix), or nullptr.
  const GraphSignature* nearest(const GraphSignature& signature) const;

 private:
  struct Bound {
    uint64_t sizes_hash = 0;
    std::vector<int64_t> sizes;
    std::shared_ptr<backend::Executable> executable;
  };
  struct Entry {
    GraphSignature signature;  // its sizes: those of the graph it was compiled from
    std::shared_ptr<backend::CompiledGraph> compiled;
    std::list<Bound> bound;  // most recent first
  };
  std::list<Entry> lru_;  // most recent first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> by_hash_;
};

}  // namespace lt::runtime
