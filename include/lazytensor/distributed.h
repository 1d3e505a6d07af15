#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lazytensor/reduce_op.h"
#include "lazytensor/tensor.h"

// Data parallelism over MPI (Open MPI, as MLX's distributed module and Horovod run on CPUs).
// A program started by `mpirun -np N` calls init() and becomes rank rank() of world_size()
// processes; the same program started alone (or built without MPI) is a world of one, where
// every collective returns its input.
//
// Collectives are traced ops like any other: they join the graph that mark_step() compiles and
// run on the device stream, in the order traced, while the host traces on. Every rank must
// trace the same collectives in the same order with the same shapes and dtypes; before each one
// the ranks compare what they are about to run, and a difference is an lt::Error that names
// both sides. A collective that cannot complete (a rank died or stopped issuing them) ends the
// job after LT_DISTRIBUTED_TIMEOUT seconds (default 300) with a message naming it, instead of
// hanging. Collectives do not record gradients (as torch.distributed's do not).
namespace lt::distributed {

// Joins the world mpirun started (MPI_Init_thread, MPI_THREAD_MULTIPLE), once; later calls do
// nothing. Without mpirun's environment, or in a build without MPI, the world is this process
// alone. After finalize() collectives throw lt::Error.
void init();
// Waits for the device's queued work, then leaves MPI (MPI_Finalize). Also run at exit.
void finalize();
// Ends every rank of the job at once (MPI_Abort) with `exit_code`; alone, this process. For a
// rank that cannot go on: the others would otherwise wait in their next collective until the
// timeout.
[[noreturn]] void abort(int exit_code);
// Whether this build has MPI (the library was built with Open MPI found).
bool available();
int rank();        // 0 before init() and in a world of one
int world_size();  // 1 before init() and in a world of one
// Every rank waits until all have reached it, after their queued device work has finished.
void barrier();

// Each rank's `t` combined element-wise (mean: the sum divided by world_size()); the same
// result on every rank. bf16 and f16 are reduced in f32 and rounded once.
Tensor all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum);
// The ranks' tensors concatenated along dim 0, in rank order.
Tensor all_gather(const Tensor& t);
// all_reduce's result split into world_size() equal parts along dim 0; rank r gets part r.
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::sum);
// Rank `root`'s tensor, on every rank.
Tensor broadcast(const Tensor& t, int root = 0);

// All-reduces many tensors in few messages (as PyTorch DDP's gradient buckets do): tensors of
// one dtype are flattened into buckets of up to `bucket_bytes`, each bucket is one all_reduce,
// and each tensor is replaced by its part of the result. For gradients before the optimizer.
void all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op = ReduceOp::mean,
                          size_t bucket_bytes = size_t{25} << 20);

// Data parallelism's step between backward() and the optimizer: every parameter's grad()
// becomes the mean of the ranks' grad(), all-reduced in buckets (all_reduce_coalesced).
// Parameters without a gradient are skipped (every rank must have the same ones).
void average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes = size_t{25} << 20);

}  // namespace lt::distributed
