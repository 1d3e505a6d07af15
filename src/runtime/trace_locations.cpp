#include "runtime/trace_locations.h"

#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "ir/node.h"
#include "lazytensor/runtime.h"
#include "runtime/config.h"

namespace lt::runtime {

namespace {

struct Locations {
  std::mutex mu;
  std::function<std::string()> provider;
  // First serial of an op -> (one past its last serial, where it was traced). Bounded: the
  // oldest ops are forgotten first.
  std::map<uint64_t, std::pair<uint64_t, std::string>> ops;
};
constexpr size_t kMaxOps = 1 << 16;

Locations& locations() {
  static Locations* l = new Locations();
  return *l;
}

struct PendingOp {
  bool active = false;
  uint64_t first = 0;
  std::string where;
};
thread_local PendingOp t_op;

}  // namespace

void begin_traced_op() {
  t_op.active = false;
  if (!config().debug.load(std::memory_order_relaxed)) return;
  std::function<std::string()> provider;
  {
    Locations& l = locations();
    const std::lock_guard<std::mutex> lock(l.mu);
    provider = l.provider;
  }
  if (!provider) return;
  t_op.where = provider();
  if (t_op.where.empty()) return;
  t_op.first = ir::upcoming_serial();
  t_op.active = true;
}

void end_traced_op() {
  if (!t_op.active) return;
  t_op.active = false;
  const uint64_t end = ir::upcoming_serial();
  if (end <= t_op.first) return;
  Locations& l = locations();
  const std::lock_guard<std::mutex> lock(l.mu);
  l.ops[t_op.first] = {end, std::move(t_op.where)};
  if (l.ops.size() > kMaxOps) l.ops.erase(l.ops.begin());
}

std::string trace_location_of(uint64_t serial) {
  Locations& l = locations();
  const std::lock_guard<std::mutex> lock(l.mu);
  auto it = l.ops.upper_bound(serial);
  if (it == l.ops.begin()) return {};
  --it;
  return serial < it->second.first ? it->second.second : std::string();
}

}  // namespace lt::runtime

namespace lt {

void set_trace_location_provider(std::function<std::string()> provider) {
  runtime::Locations& l = runtime::locations();
  const std::lock_guard<std::mutex> lock(l.mu);
  l.provider = std::move(provider);
}

}  // namespace lt
