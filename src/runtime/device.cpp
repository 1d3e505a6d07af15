#include "runtime/device.h"

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "backend/registry.h"
#include "lazytensor/error.h"
#include "runtime/backends.h"
#include "runtime/config.h"
#include "runtime/step_journal.h"

namespace lt::runtime {

namespace {

template <typename T>
std::optional<DeviceData::HostRange> range_of(const T* values, const Shape& shape) {
  DeviceData::HostRange range;
  const int64_t n = shape.numel();
  if (n == 0) return std::nullopt;
  range.min = range.max = values[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = values[i];
    if (v < range.min) {
      range.min = v;
      range.min_at = i;
    } else if (v > range.max) {
      range.max = v;
      range.max_at = i;
    }
    if (v < 0 && (!range.max_negative || v > *range.max_negative)) {
      range.max_negative = v;
      range.max_negative_at = i;
    }
  }
  return range;
}

}  // namespace

ir::NodePtr leaf_node(const DeviceDataPtr& data) {
  // Held for a few instructions, so a spin that yields beats parking the thread.
  struct SpinGuard {
    std::atomic_flag& flag;
    explicit SpinGuard(std::atomic_flag& f) : flag(f) {
      while (flag.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
    }
    ~SpinGuard() { flag.clear(std::memory_order_release); }
  } guard(data->leaf_lock);
  if (ir::NodePtr leaf = data->leaf.lock()) return leaf;
  auto leaf = ir::make_node(ir::OpKind::DeviceData, data->dtype, data->shape, {});
  leaf->data = data;
  leaf->device = data->device;
  data->leaf = leaf;
  return leaf;
}

backend::BackendSettings backend_settings() {
  const Config& c = config();
  backend::BackendSettings settings;
  settings.threads = c.num_threads;
  settings.memory_limit = static_cast<int64_t>(c.device_memory_limit.load());
  settings.kernels.native = c.kernel_compiler() == "native";
  settings.kernels.tiered = c.tiered_compilation;
  settings.kernels.cache_dir = c.kernel_cache_dir();
  settings.kernels.cache_bytes = c.kernel_cache_bytes;
  settings.kernels.cache_entries = c.kernel_cache_size;
  const char* cxx = std::getenv("LT_CXX");
  if (cxx && *cxx) settings.kernels.compiler = cxx;
  return settings;
}

backend::Backend& backend_of(const Device& device) {
  return backend::backend_for(device, backend_settings());
}

DeviceDataPtr upload(const void* values, const Shape& shape, DType dtype, const Device& device,
                     bool synchronous) {
  backend::Backend& backend = backend_of(device);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto buffer = backend.allocate(bytes);
  backend.transfer_to_device(buffer, values, bytes, synchronous);
  auto data = std::make_shared<DeviceData>(shape, dtype, device, std::move(buffer));
  if (dtype == DType::i64) data->host_range = range_of(static_cast<const int64_t*>(values), shape);
  if (dtype == DType::i32) data->host_range = range_of(static_cast<const int32_t*>(values), shape);
  return data;
}

DeviceDataPtr fill_from_host(const Shape& shape, DType dtype, const Device& device,
                             const std::function<void(void*)>& fill) {
  backend::Backend& backend = backend_of(device);
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  if (!backend.host_addressable()) {
    std::unique_ptr<char[]> values(new char[bytes]);
    fill(values.get());
    return upload(values.get(), shape, dtype, device);
  }
  // No step has this new buffer yet, so the host may write it while the device works.
  auto buffer = backend.allocate(bytes);
  fill(buffer->data());
  return std::make_shared<DeviceData>(shape, dtype, device, std::move(buffer));
}

void download(const DeviceData& data, void* dst) {
  try {
    backend_of(data.device)
        .transfer_from_device(data.buffer, dst,
                              static_cast<size_t>(data.shape.numel()) * dtype_size(data.dtype));
  } catch (const Error&) {
    settle_failed_step();  // the failed step's host state is put back as its error is raised
    throw;
  }
}

bool host_addressable(const Device& device) {
  return backend_of(device).host_addressable();
}

bool keeps_row_local_temporaries(const Device& device) {
  return config().row_groups && backend_of(device).keeps_row_local_temporaries();
}

void* host_address(const DeviceData& data, const char* op) {
  backend_of(data.device).record_event().wait();  // the step computing it is done
  if (data.buffer->failed()) {
    settle_failed_step();
    data.buffer->error().raise(std::string(op) + ": ");
  }
  return data.buffer->data();
}

DeviceDataPtr wrap_external(const void* data, const Shape& shape, DType dtype, const Device& device,
                            std::function<void()> release) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  auto buffer = backend_of(device).wrap_host_memory(const_cast<void*>(data), bytes,
                                                    [release = std::move(release)] {
                                                      if (release) release();
                                                    });
  auto value = std::make_shared<DeviceData>(shape, dtype, device, std::move(buffer));
  // Held for good by its owner: no step ever writes an output over memory it does not own.
  value->holders.fetch_add(1);
  return value;
}

int64_t memory_capacity(const Device& device) {
  return backend_of(device).memory_capacity();
}

int64_t memory_available(const Device& device) {
  return backend_of(device).memory_available();
}

}  // namespace lt::runtime
