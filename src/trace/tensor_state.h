#pragma once
// What the Tensor API keeps per tensor beside its value: autograd's state, view and write
// tracking, autocast's kept copy. It hangs on TensorImpl::front_end, which the runtime never
// looks into; most tensors never get one (no autograd, no view, never written in place).
#include <atomic>
#include <cstdint>
#include <memory>

#include "runtime/tensor_impl.h"

namespace lt {

namespace autograd {
struct Meta;
// Defined where Meta is complete, so this header need not include autograd's.
struct MetaDeleter {
  void operator()(Meta* meta) const;
};
}  // namespace autograd

namespace trace {

struct TensorState final : runtime::FrontEndState {
  TensorState();

  // Autograd's state (requires_grad, grad_fn, grad); null for tensors autograd never saw.
  std::unique_ptr<autograd::Meta, autograd::MetaDeleter> autograd;
  // Made by a view op (reshape, transpose, ...): in-place ops on it are refused, since the
  // base would not see them.
  bool is_view = false;
  // Counts the in-place writes of this tensor (trace::assign): what a kept autocast copy was
  // made at is compared with it.
  std::atomic<uint64_t> writes{0};
  // Autocast's kept bf16 copy of this tensor, the writes it was cast at, and whether a product
  // read it since; guarded by autocast's mutex (trace/autocast.cpp).
  std::shared_ptr<TensorImpl> autocast_copy;
  uint64_t autocast_copy_writes = 0;
  bool autocast_copy_read = false;
};

// The Tensor API's state of `impl`, made on first use (by any thread: ops on several threads
// may reach one tensor at once). Throws lt::Error if another front end made the tensor.
TensorState& state_of(TensorImpl& impl);
// The state if one was made, else null: what a tensor without one answers is the default.
TensorState* find_state(const TensorImpl& impl);

}  // namespace trace

}  // namespace lt
