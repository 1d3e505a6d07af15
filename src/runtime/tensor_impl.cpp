#include "runtime/tensor_impl.h"

#include <mutex>
#include <thread>

#include "autograd/function.h"
#include "backend/registry.h"
#include "runtime/step_journal.h"

namespace lt {

namespace {

struct Registry {
  std::mutex mu;
  TensorImpl* head = nullptr;
  TensorImpl* tail = nullptr;
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

void link(TensorImpl* impl) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (impl->registered) return;
  impl->registered = true;
  impl->prev = r.tail;
  impl->next = nullptr;
  (r.tail ? r.tail->next : r.head) = impl;
  r.tail = impl;
}

void unlink(TensorImpl* impl) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!impl->registered) return;
  impl->registered = false;
  (impl->prev ? impl->prev->next : r.head) = impl->next;
  (impl->next ? impl->next->prev : r.tail) = impl->prev;
  impl->prev = impl->next = nullptr;
}

template <typename T>
std::optional<runtime::DeviceData::HostRange> range_of(const T* values, const Shape& shape) {
  runtime::DeviceData::HostRange range;
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

void release(runtime::DeviceDataPtr& data) {
  if (data) data->holders.fetch_sub(1, std::memory_order_relaxed);
  data.reset();
}

}  // namespace

TensorImpl::~TensorImpl() {
  unlink(this);
  release(data);
}

void TensorImpl::set_ir(ir::NodePtr node) {
  if (data) before_step = data;
  release(data);
  ir = std::move(node);
  link(this);
}

void TensorImpl::set_data(runtime::DeviceDataPtr value) {
  if (value) value->holders.fetch_add(1, std::memory_order_relaxed);
  release(data);
  data = std::move(value);
  before_step.reset();
  ir.reset();
  unlink(this);
}

ir::NodePtr TensorImpl::value() const {
  return ir ? ir : runtime::leaf_node(data);
}

namespace runtime {

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

backend::Backend& backend_of(const Device& device) {
  return backend::backend_for(device);
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

std::vector<std::shared_ptr<TensorImpl>> pending_tensors() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::shared_ptr<TensorImpl>> out;
  for (TensorImpl* impl = r.head; impl; impl = impl->next) {
    if (auto alive = impl->weak_from_this().lock()) out.push_back(std::move(alive));
  }
  return out;
}

}  // namespace runtime

}  // namespace lt
