#pragma once
// The process group behind lt::distributed: MPI_COMM_WORLD when the library is built with MPI
// and the process was started by mpirun, otherwise a world of one. Collectives reach it from
// the CPU backend's opaque ops, on the device stream.
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

// Runs it with the other ranks. Before the data moves, the ranks compare what each is about to
// run; a difference throws lt::Error naming every rank's collective (on every rank). A wait
// that outlasts LT_DISTRIBUTED_TIMEOUT seconds ends the job (MPI_Abort) with a message.
void run(const Collective& collective);

// The name of a collective for messages: "all_reduce(sum)", "broadcast(root 1)".
const char* op_name(ir::OpKind op);
const char* reduce_op_name(ReduceOp op);

}  // namespace lt::distributed::detail
