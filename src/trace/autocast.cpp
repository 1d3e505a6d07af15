// Autocast (lazytensor/autocast.h): the thread's state, the bf16 copies of products' operands
// and the parameters' kept copies.
#include "trace/autocast.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "lazytensor/autocast.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "runtime/front_end_hooks.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/tensor_state.h"
#include "trace/trace.h"

namespace lt {

namespace {

thread_local DType t_autocast_dtype = DType::f32;

// Guards every TensorImpl's autocast_copy fields and the list of tensors that have one.
std::mutex& copies_mutex() {
  static std::mutex* mu = new std::mutex();
  return *mu;
}

// The tensors that keep a copy (weak: a tensor that dies takes its copy with it), pruned at
// every mark_step and, between them, whenever the list has doubled.
struct KeptList {
  std::vector<std::weak_ptr<TensorImpl>> tensors;
  size_t after_pruning = 0;
};

KeptList& kept() {
  static auto* list = new KeptList();
  return *list;
}

void remember(const std::shared_ptr<TensorImpl>& impl) {
  KeptList& list = kept();
  if (list.tensors.size() >= 2 * list.after_pruning + 64) {
    std::erase_if(list.tensors, [](const auto& weak) { return weak.expired(); });
    list.after_pruning = list.tensors.size();
  }
  list.tensors.push_back(impl);
}

bool castable(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16;
}

void warn_if_bf16_is_not_faster() {
  // Once a process: a CPU without bf16 instructions (AVX512_BF16 or AMX) widens bf16 operands
  // or emulates bf16 products, which is no faster than f32 and rounds more.
  static std::once_flag warned;
  std::call_once(warned, [] {
    if (default_device().type != DeviceType::cpu) return;
    const std::string isa = matmul_isa(DType::bf16);
    if (isa == "amx" || isa == "avx512_bf16") return;
    std::fprintf(stderr,
                 "lazytensor: warning: bf16 autocast on a CPU without bf16 instructions (its bf16 "
                 "products run on %s: %s): it will not be faster than f32\n",
                 isa.c_str(), matmul_library(DType::bf16).c_str());
  });
}

}  // namespace

AutocastGuard::AutocastGuard(DType dtype) : previous_(t_autocast_dtype) {
  if (dtype != DType::bf16 && dtype != DType::f32) {
    throw Error(std::string("AutocastGuard: autocast computes products in bf16 (DType::bf16, or "
                            "DType::f32 to turn it off), not in ") +
                dtype_name(dtype));
  }
  if (dtype == DType::bf16) warn_if_bf16_is_not_faster();  // may throw: before the switch
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

void make_autocast_copies(const std::vector<Tensor>& tensors) {
  const runtime::TraceScope scope("make_autocast_copies");
  for (const Tensor& t : tensors) {
    // Not read yet: a parameter no product reads (an embedding table, a layer norm's weight)
    // loses its copy at the first write instead of having it cast again every step.
    if (t.dtype() == DType::f32) trace::kept_copy(t, /*read=*/false);
  }
}

namespace trace {

bool autocasts(const ir::NodePtr& a, const ir::NodePtr& b) {
  return t_autocast_dtype == DType::bf16 && castable(a->dtype) && castable(b->dtype);
}

Tensor bf16_copy(const Tensor& x) {
  const NoGradGuard no_grad;
  const ir::NodePtr value = value_of(x, "autocast");
  // A view that reads as many elements as its base holds (a permutation of attention's heads,
  // a transpose, a reshape): its base is cast and viewed again, so that the cast fuses into
  // the kernel computing the base (which then need not store its f32 value at all) instead of
  // being a kernel of its own that reads through the view.
  if (value->op == ir::OpKind::View && value->shape.numel() >= value->operands[0]->shape.numel()) {
    std::vector<int64_t> layout;
    for (size_t a = 0; a < value->attrs.size(); ++a) layout.push_back(value->attrs[a]);
    Tensor copy = make_tensor(ir::make_node(ir::OpKind::View, DType::bf16, value->shape,
                                            {cast(value->operands[0], DType::bf16)}, layout));
    state_of(*copy.impl()).is_view = true;
    return copy;
  }
  return x.to(DType::bf16);
}

Tensor autocast_operand(const Tensor& x) {
  return x.dtype() == DType::bf16 ? x : kept_copy(x, /*read=*/true);
}

Tensor kept_copy(const Tensor& x, bool read) {
  const NoGradGuard no_grad;
  // Every tensor keeps its copy while it lives (the query, key and value products of one
  // input cast it once), listed for mark_step's refresh.
  TensorState& state = state_of(*x.impl());
  const std::lock_guard<std::mutex> lock(copies_mutex());
  const uint64_t writes = state.writes.load(std::memory_order_relaxed);
  if (state.autocast_copy && state.autocast_copy_writes == writes) {
    state.autocast_copy_read = state.autocast_copy_read || read;
    return Tensor(state.autocast_copy);
  }
  if (!state.autocast_copy) remember(x.impl());
  const Tensor copy = bf16_copy(x);
  state.autocast_copy = copy.impl();
  state.autocast_copy_writes = writes;
  state.autocast_copy_read = read;
  return copy;
}

namespace {
const bool g_registered = (runtime::add_step_cut_hook(refresh_autocast_copies), true);
}  // namespace

void refresh_autocast_copies() {
  // Called under the cut (the trace lock held exclusively, so no op on any thread reads or
  // rebinds a tensor meanwhile); the copies' mutex is taken after the trace lock, as by
  // kept_copy inside an op.
  const std::lock_guard<std::mutex> lock(copies_mutex());
  KeptList& list = kept();
  std::erase_if(list.tensors, [](const std::weak_ptr<TensorImpl>& weak) {
    const std::shared_ptr<TensorImpl> tensor_impl = weak.lock();
    TensorState* impl = tensor_impl ? find_state(*tensor_impl) : nullptr;
    if (!impl || !impl->autocast_copy) return true;
    const uint64_t writes = impl->writes.load(std::memory_order_relaxed);
    if (impl->autocast_copy_writes == writes) return false;
    // Written since its cast. A parameter (a leaf that requires grad, now) whose copy was
    // read gets its new copy in this graph; any other copy is dropped, so that a stale one
    // is neither computed by this cut nor kept.
    const Tensor tensor(tensor_impl);
    if (!impl->autocast_copy_read || !tensor.requires_grad() || !tensor.is_leaf()) {
      impl->autocast_copy.reset();
      return true;
    }
    // Rebound in place: a step that fails gives the copy its old value back, with the
    // parameter's.
    impl->autocast_copy->set_ir(cast(tensor_impl->value(), DType::bf16));
    impl->autocast_copy_writes = writes;
    impl->autocast_copy_read = false;
    return false;
  });
  list.after_pruning = list.tensors.size();
}

}  // namespace trace

}  // namespace lt
