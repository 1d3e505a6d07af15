#include "runtime/compile_cache.h"

#include <algorithm>
#include <chrono>

#include "metrics/metrics_registry.h"
#include "runtime/config.h"

namespace lt::runtime {

namespace {

// Sizes each compiled graph keeps executables for. An executable is a few thousand launches'
// geometry, and binding one again costs about half a compile of its graph (milliseconds), so
// a few recent sizes are enough: generation meets each length once, and a training run with
// dynamic padding that cycles through more lengths rebinds a little more often.
constexpr size_t kBoundSizesPerGraph = 8;

}  // namespace

std::shared_ptr<backend::Executable> CompileCache::find(const GraphSignature& signature,
                                                        const ir::Graph& graph,
                                                        std::string& why_not) {
  static metrics::Counter& size_binds = metrics::counter("SizeBind");
  static metrics::Timer& bind_time = metrics::timer("BindTime");
  auto [begin, end] = by_hash_.equal_range(signature.hash);
  for (auto it = begin; it != end; ++it) {
    Entry& entry = *it->second;
    if (entry.signature.words != signature.words) continue;
    for (auto b = entry.bound.begin(); b != entry.bound.end(); ++b) {
      if (b->sizes_hash == signature.sizes_hash && b->sizes == signature.sizes) {
        entry.bound.splice(entry.bound.begin(), entry.bound, b);
        lru_.splice(lru_.begin(), lru_, it->second);
        return b->executable;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    std::string why;
    std::shared_ptr<backend::Executable> executable = entry.compiled->bind(graph, &why);
    if (!executable) {
      if (why_not.empty()) why_not = why;
      continue;
    }
    bind_time.record(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    size_binds.add();
    entry.bound.push_front({signature.sizes_hash, signature.sizes, executable});
    if (entry.bound.size() > kBoundSizesPerGraph) entry.bound.pop_back();
    lru_.splice(lru_.begin(), lru_, it->second);
    return executable;
  }
  return nullptr;
}

void CompileCache::insert(const GraphSignature& signature,
                          std::shared_ptr<backend::CompiledGraph> compiled,
                          std::shared_ptr<backend::Executable> executable) {
  lru_.push_front({signature, std::move(compiled), {}});
  lru_.front().bound.push_front({signature.sizes_hash, signature.sizes, std::move(executable)});
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
