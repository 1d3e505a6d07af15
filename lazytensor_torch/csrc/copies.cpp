// Making device tensors, copying between the host and the device, reading one number, and the
// view and storage ops that PyTorch's own view machinery needs from a device.
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "storage.h"

namespace lazytensor_torch {
namespace {

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory,
                   const char* op) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided, op,
              ": the lazytensor device has strided tensors only");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), op,
              ": pinned memory is a CPU tensor's property");
}

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<at::Device>,
                               std::optional<bool> pin_memory, std::optional<c10::MemoryFormat>) {
  check_options(layout, pin_memory, "empty");
  return empty(C10_AS_INTARRAYREF_SLOW(size), c10::dtype_or_default(dtype));
}

at::Tensor empty_strided_kernel(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                                std::optional<at::ScalarType> dtype,
                                std::optional<c10::Layout> layout, std::optional<at::Device>,
                                std::optional<bool> pin_memory) {
  check_options(layout, pin_memory, "empty_strided");
  return lazytensor_torch::empty_strided(
      C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), c10::dtype_or_default(dtype));
}

// The host's bytes as an engine value (one upload, asynchronous).
lt::Tensor upload(const at::Tensor& host) {
  const at::Tensor contiguous = host.contiguous();
  const lt::DType dtype = to_engine(contiguous.scalar_type(), "copy to lazytensor");
  std::vector<int64_t> sizes(contiguous.sizes().begin(), contiguous.sizes().end());
  return lt::from_host(contiguous.const_data_ptr(), lt::Shape(sizes), dtype);
}

// The device tensor's value into the host tensor `dst` (same shape).
void download(const lt::Tensor& value, const at::Tensor& dst) {
  if (dst.is_contiguous() && dst.scalar_type() == to_torch(value.dtype())) {
    value.to_host(dst.mutable_data_ptr());
    return;
  }
  at::Tensor staging = at::empty(dst.sizes(), dst.options().dtype(to_torch(value.dtype())));
  value.to_host(staging.mutable_data_ptr());
  dst.copy_(staging);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.sizes() == dst.sizes(), "_copy_from: shapes ", self.sizes(), " and ",
              dst.sizes(), " differ");
  if (is_device_tensor(dst)) {
    write(dst, is_device_tensor(self) ? read(self) : upload(self));
  } else {
    TORCH_CHECK(dst.device().is_cpu(),
                "_copy_from: the lazytensor device copies to and from "
                "the CPU only, not ",
                dst.device());
    download(read(self), dst);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype,
                   std::optional<c10::Layout> layout, std::optional<at::Device> device,
                   std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<c10::MemoryFormat>) {
  check_options(layout, pin_memory, "_to_copy");
  const at::ScalarType type = dtype.value_or(self.scalar_type());
  const at::Device target = device.value_or(self.device());
  if (target.type() == c10::DeviceType::PrivateUse1) {
    const lt::Tensor value = is_device_tensor(self) ? read(self) : upload(self);
    const lt::DType engine_type = to_engine(type, "_to_copy");
    return wrap(value.dtype() == engine_type ? value : value.to(engine_type));
  }
  TORCH_CHECK(target.is_cpu(),
              "_to_copy: the lazytensor device copies to and from the CPU "
              "only, not ",
              target);
  at::Tensor out = at::empty(self.sizes(), self.options().device(target).dtype(type));
  return copy_from(self, out, non_blocking);
}

// A read of one element: computes what it needs and waits for it.
at::Scalar local_scalar_dense(const at::Tensor& self) {
  const lt::Tensor value = read(self);
  switch (value.dtype()) {
    case lt::DType::boolean:
      return at::Scalar(value.item() != 0);
    case lt::DType::i32:
    case lt::DType::i64:
    case lt::DType::u8:
      return at::Scalar(value.to_vector<int64_t>().at(0));
    default:
      return at::Scalar(value.item());
  }
}

at::Tensor as_strided_view(const at::Tensor& self, c10::SymIntArrayRef size,
                           c10::SymIntArrayRef stride, std::optional<c10::SymInt> offset) {
  return at::native::as_strided_tensorimpl(
      self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
      offset ? std::optional<int64_t>(offset->expect_int()) : std::nullopt);
}

at::Tensor view_alias(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// Grows the storage when the new shape needs more elements (the old ones are kept, the new ones
// read as zeros), as resize_ on any device.
const at::Tensor& resize(const at::Tensor& self, c10::SymIntArrayRef size,
                         std::optional<c10::MemoryFormat>) {
  const at::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  const size_t needed = static_cast<size_t>(numel + self.storage_offset()) * self.itemsize();
  c10::StorageImpl* storage = self.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  if (storage->nbytes() < needed) {
    at::Tensor grown = empty({static_cast<int64_t>(needed / self.itemsize())}, self.scalar_type());
    if (storage->nbytes() > 0) {
      at::Tensor old = empty({0}, self.scalar_type());
      old.set_(self.storage(), 0, {static_cast<int64_t>(storage->nbytes() / self.itemsize())}, {1});
      grown.narrow(0, 0, old.numel()).copy_(old);
    }
    self.unsafeGetTensorImpl()->set_storage_keep_dtype(grown.storage());
  }
  self.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return self;
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.itemsize());
  return self.set_(source, 0, {numel}, {1});
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, c10::SymInt offset,
                                      c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_sizes_and_strides(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                              offset.expect_int());
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided_kernel);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_to_copy", to_copy);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("as_strided", as_strided_view);
  m.impl("view", view_alias);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Storage_storage_offset", set_source_storage_offset);
}

}  // namespace lazytensor_torch
