#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace lt::runtime {

// A graph's structure, flattened: one record per node in topological order (op, dtype,
// shape, operand positions, attributes; never scalar argument values or buffer identities),
// then the outputs. Two graphs with equal signatures compile to the same executable.
struct GraphSignature {
  std::vector<uint64_t> words;
  uint64_t hash = 0;
};

// A bounded LRU map from graph signature to executable. A hit requires the whole signature
// to be equal, never the hash alone.
class CompileCache {
 public:
  std::shared_ptr<backend::Executable> find(const GraphSignature& signature);
  void insert(const GraphSignature& signature, std::shared_ptr<backend::Executable> executable);
  size_t size() const { return lru_.size(); }
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
