#include "runtime/tensor_impl.h"

#include <mutex>
#include <thread>

#include "runtime/device.h"

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

void release(runtime::DeviceDataPtr& data) {
  if (data) data->holders.fetch_sub(1, std::memory_order_relaxed);
  data.reset();
}

}  // namespace

TensorImpl::~TensorImpl() {
  unlink(this);
  release(data);
  delete front_end.load(std::memory_order_acquire);
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
