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

namespace runtime {
// What a front end keeps per tensor beside its value (the Tensor API's: trace/tensor_state.h).
// The runtime never looks inside; it only deletes it with the tensor. `kind` tells the front
// ends' states apart: each made its tensors, and answers for those alone.
struct FrontEndState {
  explicit FrontEndState(const void* owner) : kind(owner) {}
  virtual ~FrontEndState() = default;
  const void* const kind;
};
}  // namespace runtime

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
  // The front end's state of this tensor, made by the front end when it first needs one
  // (most tensors never get one); owned here.
  std::atomic<runtime::FrontEndState*> front_end{nullptr};

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
