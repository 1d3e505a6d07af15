#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "runtime/graph_signature.h"

namespace lt::runtime {

// A bounded LRU map from graph signature to executable. A hit requires the whole signature
// to be equal, never the hash alone.
class CompileCache {
 public:
  std::shared_ptr<backend::Executable> find(const GraphSignature& signature);
  void insert(const GraphSignature& signature, std::shared_ptr<backend::Executable> executable);
  size_t size() const { return lru_.size(); }
  void clear() {
    by_hash_.clear();
    lru_.clear();
  }
  // The cached signature closest to `signature` (longest common prefix), or nullptr.
  const GraphSignature* nearest(const GraphSignature& signature) const;

 private:
  struct Entry {
    GraphSignature signature;
    std::shared_ptr<backend::Executable> executable;
  };
  std::list<Entry> lru_;  // most recent first
  std::unordered_multimap<uint64_t, std::list<Entry>::iterator> by_hash_;
};

}  // namespace lt::runtime
