#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ir/node.h"
#include "lazytensor/device.h"
#include "lazytensor/dtype.h"
#include "lazytensor/shape.h"
#include "runtime/device_data.h"

namespace lt {

namespace autograd {
struct Meta;
// Defined where Meta is complete, so this header need not include autograd's.
struct MetaDeleter {
  void operator()(Meta* meta) const;
};
}  // namespace autograd

// What a Tensor handle points at: either a pending IR value or device data, never both.
// Pending tensors are kept in a registry so that mark_step() can find every live one; a
// tensor that dies while pending is simply never computed.
struct TensorImpl : std::enable_shared_from_this<TensorImpl> {
  TensorImpl(const Shape& s, DType d, const Device& where) : shape(s), dtype(d), device(where) {}
  ~TensorImpl();
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;

  Shape shape;
  DType dtype;
  Device device;
  ir::NodePtr ir;
  runtime::DeviceDataPtr data;
  // While pending: the value this tensor had before (in-place ops since the last step), which
  // a failed step gives back. Not counted among its holders, so that the step may still
  // donate its buffer to this tensor's own new value.
  runtime::DeviceDataPtr before_step;
  // Autograd's state (requires_grad, grad_fn, grad); null for tensors autograd never saw.
  std::unique_ptr<autograd::Meta, autograd::MetaDeleter> autograd;
  // Made by a view op (reshape, transpose, ...): in-place ops on it are refused, since the
  // base would not see them.
  bool is_view = false;
  // Counts the in-place writes of this tensor (trace::assign): what a kept autocast copy was
  // made at is compared with it.
  std::atomic<uint64_t> writes{0};
  // Autocast's kept bf16 copy of this tensor, the writes it was cast at, and
  // whether a product read it since; guarded by autocast's mutex (trace/autocast.cpp).
  std::shared_ptr<TensorImpl> autocast_copy;
  uint64_t autocast_copy_writes = 0;
  bool autocast_copy_read = false;

  // Rebinds to a pending value (registering as pending) or to device data.
  void set_ir(ir::NodePtr node);
  void set_data(runtime::DeviceDataPtr value);
  // The IR node for this tensor's current value.
  ir::NodePtr value() const;

  // Registry links, guarded by the registry's mutex.
  TensorImpl* prev = nullptr;
  TensorImpl* next = nullptr;
  bool registered = false;
};

namespace runtime {
// Every live pending tensor, in the order they became pending.
std::vector<std::shared_ptr<TensorImpl>> pending_tensors();
}  // namespace runtime

}  // namespace lt
