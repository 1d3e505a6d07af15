// lazytensor/distributed.h: joining and leaving the world, and the collectives as traced ops:
// one opaque node each (run by the backend through distributed/process_group), checked here
// before anything is created.
#include "lazytensor/distributed.h"

#include <climits>
#include <cstdint>
#include <map>
#include <string>

#include "distributed/process_group.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "lazytensor/runtime.h"
#include "lazytensor/tensor.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"

namespace lt::distributed {

namespace {

// The value a collective reads, not recorded by autograd (as torch.distributed's ops are not).
ir::NodePtr operand(const Tensor& t, const char* op) {
  const NoGradGuard no_grad;
  return trace::value_of(t.detach(), op);
}

// MPI reduces floating values (bf16 and f16 in f32) and 32- and 64-bit integers; a mean only
// floating ones (as torch.distributed's AVG).
void check_reduction(const char* op, DType dtype, ReduceOp reduce) {
  if (reduce == ReduceOp::mean && !dtype_is_floating(dtype)) {
    throw Error(std::string(op) + ": a mean needs a floating dtype, got " + dtype_name(dtype));
  }
  if (!dtype_is_floating(dtype) && dtype != DType::i32 && dtype != DType::i64) {
    throw Error(std::string(op) + ": cannot reduce dtype " + dtype_name(dtype) +
                " (floating dtypes, i32 and i64 can be reduced)");
  }
}

// Collectives along dim 0 need one.
void check_has_dims(const char* op, const Shape& shape) {
  if (shape.rank() == 0)
    throw Error(std::string(op) + ": expected a tensor with dims, got a scalar");
}

// Dim 0 split into world_size() equal parts (reduce_scatter).
void check_splits(const char* op, const Shape& shape) {
  check_has_dims(op, shape);
  if (shape[0] % world_size() != 0) {
    throw Error(std::string(op) + ": dim 0 of shape " + shape.str() + " does not split into " +
                std::to_string(world_size()) + " equal parts, one per rank");
  }
}

// MPI counts are ints: elements for the reductions, bytes for what is only moved.
void check_count(const char* op, const ir::NodePtr& value, bool bytes) {
  const int64_t count =
      value->shape.numel() * (bytes ? static_cast<int64_t>(dtype_size(value->dtype)) : 1);
  if (count > INT32_MAX) {
    throw Error(std::string(op) + ": " + std::to_string(count) + (bytes ? " bytes" : " elements") +
                " in one message (shape " + value->shape.str() + ", " + dtype_name(value->dtype) +
                "); MPI takes at most 2^31 - 1: split the tensor");
  }
}

Tensor collective(ir::OpKind kind, const ir::NodePtr& value, const Shape& shape, int64_t attr) {
  check_count(ir::op_info(kind).name, value,
              kind == ir::OpKind::AllGather || kind == ir::OpKind::Broadcast);
  return trace::make_tensor(ir::make_node(kind, value->dtype, shape, {value}, {attr}));
}

// Leaving the world at exit: the device stream may still be running a queued collective (a
// script that ends without finalize()), which finishes first. A failed step was reported or
// is lost with the process either way.
void finalize_at_exit() {
  if (!detail::active()) return;
  try {
    wait_device_ops();
  } catch (const Error&) {
  }
  detail::leave();
}

}  // namespace

bool available() {
  return detail::transport_in_build();
}

void init() {
  detail::join(finalize_at_exit);
}

void finalize() {
  if (!detail::active()) return;
  wait_device_ops();
  detail::leave();
}

void abort(int exit_code) {
  detail::abort_job(exit_code);
}

int rank() {
  return detail::rank();
}

int world_size() {
  return detail::size();
}

void barrier() {
  detail::check_not_left("barrier()");
  wait_device_ops();
  detail::barrier();
}

Tensor all_reduce(const Tensor& t, ReduceOp op) {
  const runtime::TraceScope scope("all_reduce");
  const ir::NodePtr value = operand(t, "all_reduce");
  check_reduction("all_reduce", value->dtype, op);
  if (world_size() == 1) return trace::make_tensor(value);
  return collective(ir::OpKind::AllReduce, value, value->shape, static_cast<int64_t>(op));
}

Tensor all_gather(const Tensor& t) {
  const runtime::TraceScope scope("all_gather");
  const ir::NodePtr value = operand(t, "all_gather");
  check_has_dims("all_gather", value->shape);
  if (world_size() == 1) return trace::make_tensor(value);
  Shape shape = value->shape;
  shape[0] *= world_size();
  trace::check_fits("all_gather", shape, value->dtype, *value->device);
  return collective(ir::OpKind::AllGather, value, shape, 0);
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op) {
  const runtime::TraceScope scope("reduce_scatter");
  const ir::NodePtr value = operand(t, "reduce_scatter");
  check_reduction("reduce_scatter", value->dtype, op);
  check_splits("reduce_scatter", value->shape);
  if (world_size() == 1) return trace::make_tensor(value);
  Shape shape = value->shape;
  shape[0] /= world_size();
  return collective(ir::OpKind::ReduceScatter, value, shape, static_cast<int64_t>(op));
}

Tensor broadcast(const Tensor& t, int root) {
  const runtime::TraceScope scope("broadcast");
  const ir::NodePtr value = operand(t, "broadcast");
  if (root < 0 || root >= world_size()) {
    throw Error("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                std::to_string(world_size()));
  }
  if (world_size() == 1) return trace::make_tensor(value);
  return collective(ir::OpKind::Broadcast, value, value->shape, root);
}

void all_reduce_coalesced(std::vector<Tensor>& tensors, ReduceOp op, size_t bucket_bytes) {
  const runtime::TraceScope scope("all_reduce_coalesced");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ir::NodePtr value = operand(tensors[i], "all_reduce_coalesced");
    check_reduction("all_reduce_coalesced", value->dtype, op);
  }
  if (world_size() == 1) return;
  // Buckets by dtype, in the tensors' order (every rank forms the same buckets).
  std::map<DType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < tensors.size(); ++i) by_dtype[tensors[i].dtype()].push_back(i);
  std::vector<std::vector<size_t>> buckets;
  for (const auto& [dtype, members] : by_dtype) {
    size_t bytes = 0;
    buckets.emplace_back();
    for (size_t i : members) {
      const size_t size = static_cast<size_t>(tensors[i].numel()) * dtype_size(dtype);
      if (!buckets.back().empty() && bytes + size > bucket_bytes) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(i);
      bytes += size;
    }
  }
  std::vector<Tensor> results(tensors.size());
  for (const std::vector<size_t>& bucket : buckets) {
    std::vector<Tensor> flat;
    for (size_t i : bucket) flat.push_back(tensors[i].detach().reshape({-1}));
    const Tensor reduced = all_reduce(flat.size() == 1 ? flat[0] : cat(flat, 0), op);
    int64_t at = 0;
    for (size_t i : bucket) {
      const int64_t n = tensors[i].numel();
      // A value of its own, not a view of the bucket: gradients get updated in place (clipping).
      results[i] = reduced.slice(0, at, at + n).reshape(tensors[i].shape().to_vector()).clone();
      at += n;
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i] = results[i];
}

void average_gradients(const std::vector<Tensor>& params, size_t bucket_bytes) {
  std::vector<Tensor> grads;
  std::vector<size_t> owners;
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i].grad().defined()) continue;
    grads.push_back(params[i].grad());
    owners.push_back(i);
  }
  all_reduce_coalesced(grads, ReduceOp::mean, bucket_bytes);
  for (size_t k = 0; k < owners.size(); ++k) params[owners[k]].mutable_grad() = grads[k];
}

}  // namespace lt::distributed
