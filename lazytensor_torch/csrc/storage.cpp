// Device tensors' storages and the device's registration with PyTorch: the allocator, the
// device guard and the hooks (lazytensor is one device, index 0, with one stream).
#include "storage.h"

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <string>

namespace lazytensor_torch {
namespace {

// What a storage holds: its elements as one engine value. `value` stays undefined until the
// storage is first used (PyTorch's empty() promises no contents: they read as zeros), and
// `dtype` is fixed by the first tensor that uses it.
struct StorageValue {
  size_t nbytes = 0;
  lt::Tensor value;
  lt::DType dtype = lt::DType::f32;
};

void delete_storage_value(void* context) {
  delete static_cast<StorageValue*>(context);
}

// The storage's "data pointer" is its StorageValue: unique while the storage lives, so
// PyTorch's aliasing checks and tied-weight detection (which compare storage pointers) see
// what they expect. Nothing dereferences it: device tensors reach only this device's kernels.
c10::DataPtr make_data_ptr(StorageValue* storage) {
  return c10::DataPtr(storage, storage, &delete_storage_value, device());
}

struct StorageAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    auto* storage = new StorageValue;
    storage->nbytes = nbytes;
    return make_data_ptr(storage);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_storage_value; }
  void copy_data(void*, const void*, size_t) const override {
    TORCH_CHECK(false, "lazytensor: device storages hold engine values, not bytes to copy");
  }
};

StorageAllocator allocator;

StorageValue& storage_of(const at::Tensor& t) {
  // A CPU tensor that reaches a device kernel (in a list with device tensors, say) has a
  // context of another kind: refused before it is read as a StorageValue.
  TORCH_CHECK(t.defined() && t.device().type() == c10::DeviceType::PrivateUse1,
              "lazytensor: expected a tensor on the lazytensor device, got one on ",
              t.defined() ? t.device().str() : std::string("no device (undefined)"));
  void* context = t.unsafeGetTensorImpl()->unsafe_storage().data_ptr().get_context();
  TORCH_CHECK(context != nullptr, "lazytensor: the tensor has no lazytensor storage");
  return *static_cast<StorageValue*>(context);
}

// The storage's value, made (as zeros) on first use, in the dtype `t` reads it as.
lt::Tensor& storage_value(const at::Tensor& t, StorageValue& storage) {
  const lt::DType dtype = to_engine(t.scalar_type(), "lazytensor");
  if (!storage.value.defined()) {
    storage.dtype = dtype;
    storage.value =
        lt::zeros({static_cast<int64_t>(storage.nbytes / lt::dtype_size(dtype))}, dtype);
  } else if (storage.dtype != dtype) {
    TORCH_CHECK(false, "lazytensor: a storage of ", lt::dtype_name(storage.dtype),
                " elements cannot be read as ", lt::dtype_name(dtype),
                " (views that reinterpret bytes are not supported)");
  }
  return storage.value;
}

// True when t is its storage's elements, all of them, in order.
bool covers_storage(const at::Tensor& t, const lt::Tensor& value) {
  return t.storage_offset() == 0 && t.numel() == value.numel() && t.is_contiguous();
}

bool same_sizes(const lt::Tensor& value, at::IntArrayRef sizes) {
  const lt::Shape& shape = value.shape();
  if (shape.rank() != static_cast<int>(sizes.size())) return false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (shape[d] != sizes[d]) return false;
  }
  return true;
}

std::vector<int64_t> to_vector(at::IntArrayRef values) {
  return {values.begin(), values.end()};
}

// One device, index 0, one stream: the engine orders its own work.
struct DeviceGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device) const override { return device(); }
  c10::Device getDevice() const override { return device(); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "lazytensor: there is one device, lazytensor:0; got ", d);
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device());
  }
  c10::Stream exchangeStream(c10::Stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void synchronizeDevice(const c10::DeviceIndex) const override { lt::wait_device_ops(); }
  void synchronizeStream(const c10::Stream&) const override { lt::wait_device_ops(); }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuard);

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::Device getDeviceFromPtr(void*) const override { return device(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    auto* value = static_cast<StorageValue*>(storage.data_ptr().get_context());
    TORCH_CHECK(value != nullptr && !value->value.defined(),
                "lazytensor: a storage that holds values cannot be resized in place");
    value->nbytes = nbytes;
    storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
  }
};

}  // namespace

at::Device device() {
  return at::Device(c10::DeviceType::PrivateUse1, 0);
}

bool is_device_tensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

lt::DType to_engine(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat:
      return lt::DType::f32;
    case at::kDouble:
      return lt::DType::f64;
    case at::kBFloat16:
      return lt::DType::bf16;
    case at::kHalf:
      return lt::DType::f16;
    case at::kInt:
      return lt::DType::i32;
    case at::kLong:
      return lt::DType::i64;
    case at::kBool:
      return lt::DType::boolean;
    case at::kByte:
      return lt::DType::u8;
    default:
      TORCH_CHECK(false, op, ": the lazytensor device has no ", c10::toString(type),
                  " tensors (it has float32, float64, bfloat16, float16, int32, int64, bool "
                  "and uint8)");
  }
}

at::ScalarType to_torch(lt::DType dtype) {
  switch (dtype) {
    case lt::DType::f32:
      return at::kFloat;
    case lt::DType::f64:
      return at::kDouble;
    case lt::DType::bf16:
      return at::kBFloat16;
    case lt::DType::f16:
      return at::kHalf;
    case lt::DType::i32:
      return at::kInt;
    case lt::DType::i64:
      return at::kLong;
    case lt::DType::boolean:
      return at::kBool;
    case lt::DType::u8:
      return at::kByte;
  }
  TORCH_CHECK(false, "lazytensor: unknown engine dtype");
}

lt::Tensor read(const at::Tensor& t) {
  StorageValue& storage = storage_of(t);
  const lt::Tensor& value = storage_value(t, storage);
  if (covers_storage(t, value)) {
    return same_sizes(value, t.sizes()) ? value : value.reshape(to_vector(t.sizes()));
  }
  return lt::as_strided(value, to_vector(t.sizes()), to_vector(t.strides()), t.storage_offset());
}

void write(const at::Tensor& t, const lt::Tensor& value) {
  StorageValue& storage = storage_of(t);
  lt::Tensor& stored = storage_value(t, storage);
  lt::Tensor v = value.dtype() == storage.dtype ? value : value.to(storage.dtype);
  if (!same_sizes(v, t.sizes())) v = v.expand(to_vector(t.sizes()));
  if (covers_storage(t, stored)) {
    stored = v;
  } else {
    stored = lt::as_strided_scatter(stored, v, to_vector(t.sizes()), to_vector(t.strides()),
                                    t.storage_offset());
  }
}

StorageSnapshot::StorageSnapshot(at::TensorList tensors) {
  saved_.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    const StorageValue& storage = storage_of(t);
    saved_.push_back({t.storage(), storage.value, storage.dtype});
  }
}

void StorageSnapshot::restore() const {
  // Last first: a storage listed twice ends with the value it had before the first write.
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    auto* storage = static_cast<StorageValue*>(it->storage.data_ptr().get_context());
    storage->value = it->value;
    storage->dtype = it->dtype;
  }
}

at::Tensor wrap(const lt::Tensor& value) {
  auto* storage = new StorageValue;
  storage->nbytes = static_cast<size_t>(value.numel()) * lt::dtype_size(value.dtype());
  storage->value = value;
  storage->dtype = value.dtype();
  const size_t nbytes = storage->nbytes;
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(c10::Storage::use_byte_size_t(), nbytes, make_data_ptr(storage), &allocator,
                   /*resizable=*/true),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(to_torch(value.dtype())));
  const lt::Shape& shape = value.shape();
  std::vector<int64_t> sizes(shape.rank());
  for (int d = 0; d < shape.rank(); ++d) sizes[d] = shape[d];
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  return t;
}

at::Tensor empty(at::IntArrayRef sizes, at::ScalarType type) {
  to_engine(type, "empty");
  return at::detail::empty_generic(
      sizes, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type, std::nullopt);
}

at::Tensor empty_strided(at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType type) {
  to_engine(type, "empty_strided");
  return at::detail::empty_strided_generic(
      sizes, strides, &allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), type);
}

Operand operand(const at::Tensor& t, const char* op) {
  if (is_device_tensor(t)) return {read(t), std::nullopt};
  TORCH_CHECK(t.defined() && t.device().is_cpu() && t.dim() == 0, op, ": a tensor on ", t.device(),
              " of shape ", t.sizes(),
              " cannot be an operand of an op on the lazytensor device (move it with "
              ".to(\"lazytensor\"); only numbers and CPU tensors of rank 0 pass as numbers)");
  return {lt::Tensor(), t.item<double>()};
}

namespace {
Hooks hooks;
struct RegisterDevice {
  RegisterDevice() {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &allocator);
    at::RegisterPrivateUse1HooksInterface(&hooks);
  }
} register_device;
}  // namespace

}  // namespace lazytensor_torch
