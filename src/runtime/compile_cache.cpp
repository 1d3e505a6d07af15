#include "runtime/compile_cache.h"

#include <algorithm>

#include "runtime/config.h"

namespace lt::runtime {

std::shared_ptr<backend::Executable> CompileCache::find(const GraphSignature& signature) {
  auto [begin, end] = by_hash_.equal_range(signature.hash);
  for (auto it = begin; it != end; ++it) {
    if (it->second->signature.words == signature.words) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->executable;
    }
  }
  return nullptr;
}

void CompileCache::insert(const GraphSignature& signature,
                          std::shared_ptr<backend::Executable> executable) {
  lru_.push_front({signature, std::move(executable)});
  by_hash_.emplace(signature.hash, lru_.begin());
  const size_t bound = std::max<size_t>(1, config().compile_cache_size);
  while (lru_.size() > bound) {
    auto victim = std::prev(lru_.end());
    auto [begin, end] = by_hash_.equal_range(victim->signature.hash);
    for (auto it = begin; it != end; ++it) {
      if (it->second == victim) {
        by_hash_.erase(it);
        break;
      }
    }
    lru_.erase(victim);
  }
}

const GraphSignature* CompileCache::nearest(const GraphSignature& signature) const {
  const GraphSignature* best = nullptr;
  size_t best_prefix = 0;
  for (const Entry& entry : lru_) {
    const auto& a = entry.signature.words;
    const auto& b = signature.words;
    size_t prefix =
        std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
        a.begin();
    if (!best || prefix > best_prefix) {
      best = &entry.signature;
      best_prefix = prefix;
    }
  }
  return best;
}

}  // namespace lt::runtime
