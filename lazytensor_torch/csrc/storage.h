#pragma once
// How a PyTorch tensor on the `lazytensor` device holds an engine value.
//
// A device tensor is an ordinary strided PyTorch tensor (sizes, strides, storage offset) whose
// storage holds, instead of memory, one engine tensor: the storage's elements in order. So
// PyTorch's own view machinery (view, t, transpose, expand, slice, select, as_strided, .data,
// detach) works unchanged and costs no engine call: a view is a new TensorImpl on the same
// storage. Reading a tensor takes its window of the storage's value (lt::as_strided; the whole
// value when the tensor covers its storage in order), and writing one replaces the window
// (lt::as_strided_scatter), so a write through a view reaches its base and every other view.
// Engine values never change in place, which makes a clone, a `.to()` and a fresh result free:
// a new storage holding the same handle.
#include <ATen/ATen.h>
#include <lazytensor/lazytensor.h>

#include <optional>

namespace lazytensor_torch {

// The engine's dtype for a PyTorch dtype; lt::Error naming `op` for one the engine lacks.
lt::DType to_engine(at::ScalarType type, const char* op);
at::ScalarType to_torch(lt::DType dtype);

// The value of a device tensor: its window of its storage's value, in its own shape.
lt::Tensor read(const at::Tensor& t);
// `value` (broadcast to t's shape and cast to t's dtype) becomes t's elements: t's window of
// its storage, seen by every tensor that shares the storage.
void write(const at::Tensor& t, const lt::Tensor& value);
// A new device tensor over a storage of its own that holds `value`.
at::Tensor wrap(const lt::Tensor& value);
// An uninitialized device tensor (its elements read as zeros until written).
at::Tensor empty(at::IntArrayRef sizes, at::ScalarType type);
at::Tensor empty_strided(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType type);

// An operand of an op on the device: a device tensor's value, or a number. A Python number
// and a CPU tensor of rank 0 (PyTorch's "wrapped number", and the optimizer's CPU `step`)
// arrive as numbers, which the engine passes as kernel arguments: no upload, no recompile.
struct Operand {
  lt::Tensor tensor;
  std::optional<double> number;
};
Operand operand(const at::Tensor& t, const char* op);

bool is_device_tensor(const at::Tensor& t);

// The values of the storages under `tensors` at construction; restore() puts them back, which
// undoes every write since (an in-place list op that fails part-way changes nothing).
class StorageSnapshot {
 public:
  explicit StorageSnapshot(at::TensorList tensors);
  void restore() const;

 private:
  struct Saved {
    c10::Storage storage;
    lt::Tensor value;
    lt::DType dtype;
  };
  std::vector<Saved> saved_;
};
// The device: `lazytensor:0`.
at::Device device();

}  // namespace lazytensor_torch
