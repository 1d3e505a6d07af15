// Autocast (lazytensor/autocast.h): the thread's state, the bf16 copies of products' operands
// and the parameters' kept copies.
#include "trace/autocast.h"

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "lazytensor/autocast.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"

namespace lt {

namespace {

thread_local DType t_autocast_dtype = DType::f32;

// Guards every TensorImpl's autocast_copy fields and the list of tensors that have one.
std::mutex& copies_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// The tensors that keep a copy (weak: a parameter that dies takes its copy with it).
std::vector<std::weak_ptr<TensorImpl>>& kept() {
  static auto* tensors = new std::vector<std::weak_ptr<TensorImpl>>();
  return *tensors;
}

bool castable(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16;
}

}  // namespace

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast_dtype) {
  if (dtype != DType::bf16 && dtype != DType::f32) {
    throw Error(std::string("AutocastGuard: autocast computes products in bf16 (DType::bf16, or "
                            "DType::f32 to turn it off), not in ") +
                dtype_name(dtype));
  }
  t_autocast_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_autocast_dtype = previous_;
}

DType autocast_dtype() {
  return t_autocast_dtype;
}

bool is_autocast_enabled() {
  return t_autocast_dtype != DType::f32;
}

namespace trace {

bool autocasts(const ir::NodePtr& a, const ir::NodePtr& b) {
  return t_autocast_dtype == DType::bf16 && castable(a->dtype) && castable(b->dtype);
}

Tensor autocast_operand(const Tensor& x) {
  if (x.dtype() == DType::bf16) return x;
  const NoGradGuard no_grad;
  if (!x.requires_grad() || !x.is_leaf()) return x.to(DType::bf16);
  TensorImpl& impl = *x.impl();
  const std::lock_guard<std::mutex> lock(copies_mutex());
  const uint64_t writes = impl.writes.load(std::memory_order_relaxed);
  if (impl.autocast_copy && impl.autocast_copy_writes == writes) {
    impl.autocast_copy_read = true;
    return Tensor(impl.autocast_copy);
  }
  if (!impl.autocast_copy) kept().push_back(x.impl());
  const Tensor copy = x.to(DType::bf16);
  impl.autocast_copy = copy.impl();
  impl.autocast_copy_writes = writes;
  impl.autocast_copy_read = true;
  return copy;
}

void refresh_autocast_copies() {
  const std::lock_guard<std::mutex> lock(copies_mutex());
  std::vector<std::weak_ptr<TensorImpl>>& tensors = kept();
  if (tensors.empty()) return;
  // New IR is made below: held as an op holds it, so that no other thread's cut rebinds a
  // tensor while it is read.
  const runtime::TraceScope scope("mark_step", runtime::TraceScope::Purpose::read);
  std::erase_if(tensors, [](const std::weak_ptr<TensorImpl>& weak) {
    const std::shared_ptr<TensorImpl> impl = weak.lock();
    if (!impl || !impl->autocast_copy) return true;
    const uint64_t writes = impl->writes.load(std::memory_order_relaxed);
    if (impl->autocast_copy_writes == writes) return false;
    if (!impl->autocast_copy_read) {
      impl->autocast_copy.reset();
      return true;
    }
    impl->autocast_copy = make_tensor(cast(impl->value(), DType::bf16)).impl();
    impl->autocast_copy_writes = writes;
    impl->autocast_copy_read = false;
    return false;
  });
}

}  // namespace trace

}  // namespace lt
