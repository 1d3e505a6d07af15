#pragma once
// The process group behind lt::distributed: MPI_COMM_WORLD when the library is built with MPI
// and the process was started by mpirun, otherwise a world of one. Collectives reach it from
// the CPU backend's opaque ops, on the device stream; lt::distributed's public functions
// (trace/distributed.cpp) join, leave and wait on it. It knows no Tensor and no runtime.
#include <cstdint>

#include "ir/ops.h"
#include "lazytensor/dtype.h"
#include "lazytensor/reduce_op.h"
#include "lazytensor/shape.h"

namespace lt::distributed::detail {

// One collective as a rank runs it: its contiguous input and the output buffer of the op's
// node shape. `attr` is the ReduceOp (AllReduce, ReduceScatter) or the root (Broadcast).
struct Collective {
  ir::OpKind op = ir::OpKind::AllReduce;
  DType dtype = DType::f32;
  Shape input_shape;
  int64_t attr = 0;
  const void* input = nullptr;
  void* output = nullptr;
};

// Whether this build can join a world (it has a transport: MPI).
bool transport_in_build();
// Joins the world the launcher started, once (later calls do nothing); `at_exit` is
// registered with std::atexit when a world was joined. Alone, this process is a world of one.
void join(void (*at_exit)());
// A world was joined and not left yet.
bool active();
int rank();  // 0 alone
int size();  // 1 alone
// Leaves the joined world, once; the caller has waited for the device's queued collectives.
void leave();
// Throws lt::Error naming `what` once the world was left: collectives are refused then.
void check_not_left(const char* what);
// Ends every rank of the job with `exit_code` (alone: this process).
[[noreturn]] void abort_job(int exit_code);
// Returns once every rank has reached it (at once when alone).
void barrier();

// Runs it with the other ranks. Before the data moves, the ranks compare what each is about to
// run; a difference throws lt::Error naming every rank's collective (on every rank). A wait
// that outlasts LT_DISTRIBUTED_TIMEOUT seconds ends the job (MPI_Abort) with a message.
void run(const Collective& collective);

// The name of a collective for messages: "all_reduce(sum)", "broadcast(root 1)".
const char* op_name(ir::OpKind op);
const char* reduce_op_name(ReduceOp op);

}  // namespace lt::distributed::detail
