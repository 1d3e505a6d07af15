#include "distributed/process_group.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "distributed/transport.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "metrics/metrics_registry.h"

namespace lt::distributed {

namespace detail {

const char* op_name(ir::OpKind op) {
  switch (op) {
    case ir::OpKind::AllReduce:
      return "all_reduce";
    case ir::OpKind::AllGather:
      return "all_gather";
    case ir::OpKind::ReduceScatter:
      return "reduce_scatter";
    case ir::OpKind::Broadcast:
      return "broadcast";
    default:
      return "collective";
  }
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::mean:
      return "mean";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

}  // namespace detail

namespace {

struct World {
  std::once_flag initialized;
  bool joined = false;  // a transport joined a world (mpirun started this process)
  // Set once the transport left (or is leaving): collectives are refused from then on.
  std::atomic<bool> finalized{false};
  int rank = 0;
  int size = 1;
  // Collectives run so far: their sequence numbers, compared across ranks.
  int64_t sequence = 0;
};

World& world() {
  static World* w = new World();  // never destroyed: the device stream may outlive statics
  return *w;
}

// "all_reduce(sum) #3 of f32[4]": a collective as messages name it.
std::string describe(const detail::Collective& c, int64_t sequence) {
  std::string text = detail::op_name(c.op);
  if (c.op == ir::OpKind::AllReduce || c.op == ir::OpKind::ReduceScatter) {
    text += std::string("(") + detail::reduce_op_name(static_cast<ReduceOp>(c.attr)) + ")";
  } else if (c.op == ir::OpKind::Broadcast) {
    text += "(root " + std::to_string(c.attr) + ")";
  }
  return text + " #" + std::to_string(sequence) + " of " + dtype_name(c.dtype) +
         c.input_shape.str();
}

void finalize_at_exit() {
  World& w = world();
  if (!w.joined || w.finalized.exchange(true)) return;
  // The device stream may still be running a queued collective (a script that ends without
  // finalize()): it finishes before the transport goes. A failed step was reported or is lost
  // with the process either way.
  try {
    wait_device_ops();
  } catch (const Error&) {
  }
  detail::transport_leave();
}

}  // namespace

bool available() {
  return detail::transport_built();
}

void init() {
  World& w = world();
  std::call_once(w.initialized, [&] {
    const std::optional<detail::Membership> member = detail::transport_join();
    if (!member) return;
    w.rank = member->rank;
    w.size = member->size;
    w.joined = true;
    std::atexit(finalize_at_exit);
  });
}

void finalize() {
  if (!world().joined || world().finalized) return;
  wait_device_ops();
  finalize_at_exit();
}

void abort(int exit_code) {
  if (world().joined && !world().finalized) detail::transport_abort(exit_code);
  std::_Exit(exit_code);
}

namespace {

void check_not_finalized(const char* what) {
  if (world().finalized) {
    throw Error(std::string("lt::distributed: ") + what + " after finalize()");
  }
}

}  // namespace

int rank() {
  return world().rank;
}

int world_size() {
  return world().size;
}

void barrier() {
  check_not_finalized("barrier()");
  wait_device_ops();
  if (!world().joined || world().size == 1) return;
  detail::transport_barrier();
}

namespace detail {

void run(const Collective& c) {
  static metrics::Counter& collectives = metrics::counter("Collective");
  static metrics::Timer& time = metrics::timer("CollectiveTime");
  const metrics::ScopedTimer timed(time);
  collectives.add();
  check_not_finalized(detail::op_name(c.op));
  World& w = world();
  if (!w.joined || w.size == 1) {
    // A world of one: the traced ops return their input, so this runs only if a graph traced
    // under mpirun is replayed alone; the result is the input itself.
    std::memcpy(c.output, c.input, c.input_shape.numel() * dtype_size(c.dtype));
    return;
  }
  const int64_t sequence = w.sequence++;
  detail::transport_run(c, sequence, describe(c, sequence));
}

}  // namespace detail

}  // namespace lt::distributed
