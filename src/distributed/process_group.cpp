#include "distributed/process_group.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "distributed/transport.h"
#include "lazytensor/error.h"
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

}  // namespace

namespace detail {

bool transport_in_build() {
  return transport_built();
}

void join(void (*at_exit)()) {
  World& w = world();
  std::call_once(w.initialized, [&] {
    const std::optional<Membership> member = transport_join();
    if (!member) return;
    w.rank = member->rank;
    w.size = member->size;
    w.joined = true;
    std::atexit(at_exit);
  });
}

bool active() {
  return world().joined && !world().finalized;
}

int rank() {
  return world().rank;
}

int size() {
  return world().size;
}

void leave() {
  World& w = world();
  if (!w.joined || w.finalized.exchange(true)) return;
  transport_leave();
}

void check_not_left(const char* what) {
  if (world().finalized) {
    throw Error(std::string("lt::distributed: ") + what + " after finalize()");
  }
}

void abort_job(int exit_code) {
  if (active()) transport_abort(exit_code);
  std::_Exit(exit_code);
}

void barrier() {
  if (!world().joined || world().size == 1) return;
  transport_barrier();
}

void run(const Collective& c) {
  static metrics::Counter& collectives = metrics::counter("Collective");
  static metrics::Timer& time = metrics::timer("CollectiveTime");
  const metrics::ScopedTimer timed(time);
  collectives.add();
  check_not_left(op_name(c.op));
  World& w = world();
  if (!w.joined || w.size == 1) {
    // A world of one: the traced ops return their input, so this runs only if a graph traced
    // under mpirun is replayed alone; the result is the input itself.
    std::memcpy(c.output, c.input, c.input_shape.numel() * dtype_size(c.dtype));
    return;
  }
  const int64_t sequence = w.sequence++;
  transport_run(c, sequence, describe(c, sequence));
}

}  // namespace detail

}  // namespace lt::distributed
