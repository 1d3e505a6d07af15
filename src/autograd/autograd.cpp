// The autograd engine: recording ops, and the backward pass that traces their gradients.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "autograd/function.h"
#include "ir/inline_vector.h"
#include "lazytensor/error.h"
#include "runtime/config.h"
#include "runtime/front_end_hooks.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/tensor_state.h"
#include "trace/trace.h"

namespace lt {

namespace {

thread_local bool t_grad_enabled = true;
thread_local bool t_operand_requires_grad = false;
// From 1: sequence 0 is the leaves' (AccumulateGrad), which run after every op.
std::atomic<uint64_t> g_next_sequence{1};

// While a Function release is drained on this thread, where dying Functions put their
// producers instead of releasing them recursively (as ir::Node does).
thread_local std::vector<std::shared_ptr<autograd::Function>>* t_release_queue = nullptr;

autograd::Meta& meta_of(const Tensor& t) {
  auto& meta = trace::state_of(*t.impl()).autograd;
  if (!meta) meta.reset(new autograd::Meta());
  return *meta;
}

// Null for tensors autograd never saw.
autograd::Meta* find_meta(const TensorImpl& impl) {
  const trace::TensorState* state = trace::find_state(impl);
  return state ? state->autograd.get() : nullptr;
}

bool is_view(const TensorImpl& impl) {
  const trace::TensorState* state = trace::find_state(impl);
  return state != nullptr && state->is_view;
}

// Where the gradient of t goes: the op that made it, or its leaf accumulator. Null if t
// needs none.
std::shared_ptr<autograd::Function> gradient_edge(const Tensor& t) {
  autograd::Meta* meta = find_meta(*t.impl());
  if (!meta) return nullptr;
  if (meta->grad_fn) return meta->grad_fn;
  if (!meta->requires_grad) return nullptr;
  if (auto existing = meta->accumulator.lock()) return existing;
  auto accumulator = std::make_shared<autograd::AccumulateGrad>(t.impl());
  meta->accumulator = accumulator;
  return accumulator;
}

class LambdaFunction final : public autograd::Function {
 public:
  LambdaFunction(const char* op, autograd::BackwardFn backward)
      : Function(op), backward_(std::move(backward)) {}
  std::vector<Tensor> apply(const Tensor& grad_output) override {
    if (!backward_) autograd::throw_released(name);
    return backward_(grad_output);
  }
  void release() override { backward_ = nullptr; }

 private:
  autograd::BackwardFn backward_;
};

// Runs the backward pass from `roots` seeded with `seeds`. Leaves accumulate into grad()
// when `accumulate`; the gradients reaching `captured` Functions are returned.
std::vector<Tensor> run_backward(const std::vector<std::shared_ptr<autograd::Function>>& roots,
                                 const std::vector<Tensor>& seeds,
                                 const std::vector<std::shared_ptr<autograd::Function>>& captured,
                                 bool accumulate, bool retain_graph) {
  NoGradGuard no_grad;
  // Every Function reachable from the roots, walked without recursion.
  std::vector<autograd::Function*> order;
  std::unordered_map<autograd::Function*, Tensor> pending;
  {
    std::vector<autograd::Function*> stack;
    for (const auto& root : roots) stack.push_back(root.get());
    std::unordered_map<autograd::Function*, char> seen;
    while (!stack.empty()) {
      autograd::Function* f = stack.back();
      stack.pop_back();
      if (!seen.emplace(f, 1).second) continue;
      order.push_back(f);
      for (const auto& producer : f->next) {
        if (producer) stack.push_back(producer.get());
      }
    }
  }
  std::sort(order.begin(), order.end(),
            [](const autograd::Function* a, const autograd::Function* b) {
              return a->sequence > b->sequence;
            });
  auto add_gradient = [&](autograd::Function* f, const Tensor& g) {
    Tensor& slot = pending[f];
    slot = slot.defined() ? slot.add(g) : g;
  };
  for (size_t r = 0; r < roots.size(); ++r) add_gradient(roots[r].get(), seeds[r]);
  std::unordered_map<autograd::Function*, char> is_captured;
  for (const auto& f : captured) {
    if (f) is_captured[f.get()] = 1;
  }
  std::vector<Tensor> results(captured.size());
  for (autograd::Function* f : order) {
    auto it = pending.find(f);
    if (it == pending.end()) continue;
    const Tensor g = std::move(it->second);
    pending.erase(it);
    for (size_t c = 0; c < captured.size(); ++c) {
      if (captured[c].get() == f) results[c] = g;
    }
    const bool leaf = dynamic_cast<autograd::AccumulateGrad*>(f) != nullptr;
    if (leaf) {
      if (accumulate) f->apply(g);
      continue;
    }
    std::vector<Tensor> grads = f->apply(g);
    if (grads.size() != f->next.size()) {
      throw Error(std::string("backward: ") + f->name + " gave " + std::to_string(grads.size()) +
                  " gradients for " + std::to_string(f->next.size()) + " inputs");
    }
    for (size_t k = 0; k < grads.size(); ++k) {
      if (f->next[k] && grads[k].defined()) add_gradient(f->next[k].get(), grads[k]);
    }
    if (!retain_graph) f->release();
  }
  return results;
}

Tensor ones_like(const Tensor& t) {
  const DeviceGuard on(t.device());
  return full(t.shape(), 1.0, t.dtype());
}

}  // namespace

bool is_grad_enabled() {
  return t_grad_enabled;
}
void set_grad_enabled(bool enabled) {
  t_grad_enabled = enabled;
}
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) {
  t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() {
  t_grad_enabled = previous_;
}

namespace autograd {

void MetaDeleter::operator()(Meta* meta) const {
  delete meta;
}

Function::Function(const char* op_name)
    : name(op_name), sequence(g_next_sequence.fetch_add(1, std::memory_order_relaxed)) {}

Function::~Function() {
  if (t_release_queue) {
    for (auto& producer : next) {
      if (producer) t_release_queue->push_back(std::move(producer));
    }
    return;
  }
  std::vector<std::shared_ptr<Function>> queue;
  t_release_queue = &queue;
  for (auto& producer : next) {
    if (producer) queue.push_back(std::move(producer));
  }
  while (!queue.empty()) {
    std::shared_ptr<Function> f = std::move(queue.back());
    queue.pop_back();
    f.reset();  // a dying Function appends its producers to the queue
  }
  t_release_queue = nullptr;
}

AccumulateGrad::AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf_impl)
    : Function("AccumulateGrad"), leaf(leaf_impl) {
  // Leaves have no producers: they come last in any order, however late this was created.
  sequence = 0;
}

std::vector<Tensor> AccumulateGrad::apply(const Tensor& grad_output) {
  std::shared_ptr<TensorImpl> impl = leaf.lock();
  if (!impl) return {};
  Tensor target(impl);
  Meta& meta = meta_of(target);
  Tensor g = grad_output.dtype() == target.dtype() ? grad_output : grad_output.to(target.dtype());
  if (meta.grad.defined()) {
    meta.grad.add_(g);  // in place, so handles to grad() see the sum, as in PyTorch
  } else {
    meta.grad = g.detach();
    // A gradient is a value of its own, whatever view of a temporary produced it: in-place
    // updates of it (clipping, zeroing) are the user's to make.
    if (trace::TensorState* state = trace::find_state(*meta.grad.impl())) state->is_view = false;
  }
  return {};
}

bool requires_grad(const Tensor& t) {
  const Meta* meta = find_meta(*t.impl());
  return meta && (meta->requires_grad || meta->grad_fn);
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && requires_grad(*t)) return true;
  }
  return false;
}

namespace {

template <class Inputs, class Get>
Tensor record_impl(std::shared_ptr<Function> function, Tensor result, const Inputs& inputs,
                   Get get) {
  function->next.reserve(inputs.size());
  for (const auto& input : inputs) {
    const Tensor& t = get(input);
    function->next.push_back(t.defined() ? gradient_edge(t) : nullptr);
  }
  meta_of(result).grad_fn = std::move(function);
  return result;
}

}  // namespace

Tensor record(const char* op, Tensor result, std::initializer_list<const Tensor*> inputs,
              BackwardFn backward) {
  return record_impl(std::make_shared<LambdaFunction>(op, std::move(backward)), std::move(result),
                     inputs, [](const Tensor* t) -> const Tensor& { return *t; });
}

Tensor record(const char* op, Tensor result, const std::vector<Tensor>& inputs,
              BackwardFn backward) {
  return record_impl(std::make_shared<LambdaFunction>(op, std::move(backward)), std::move(result),
                     inputs, [](const Tensor& t) -> const Tensor& { return t; });
}

Tensor attach(std::shared_ptr<Function> function, Tensor result,
              std::initializer_list<const Tensor*> inputs) {
  return record_impl(std::move(function), std::move(result), inputs,
                     [](const Tensor* t) -> const Tensor& { return *t; });
}

void throw_released(const char* op) {
  throw Error(std::string("backward: the graph through ") + op +
              " was already released by an earlier backward(); pass retain_graph to keep it");
}

Tensor indicator(const Tensor& mask, const Tensor& like) {
  return mask.to(like.dtype());
}

Tensor saved(const Tensor& t) {
  return t.detach();
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int lead = grad.dim() - shape.rank();
  std::vector<int> dims;
  for (int d = 0; d < grad.dim(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  }
  Tensor summed = dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
  return summed.reshape(shape.to_vector());
}

void note_operand(const Tensor& t) {
  if (t_grad_enabled && find_meta(*t.impl())) t_operand_requires_grad = true;
}

void reset_operand_note() {
  t_operand_requires_grad = false;
}

namespace {
// The in-place check looks at the current op's operands only.
const bool g_registered = (runtime::add_outermost_op_hook(reset_operand_note), true);
}  // namespace

void check_in_place(const Tensor& self, const char* op) {
  if (is_view(*self.impl())) {
    throw Error(std::string(op) +
                ": in-place ops on views are not supported (a view is a value here: its base "
                "would not change); take clone() first or use the out-of-place op");
  }
  if (!t_grad_enabled) return;
  const Meta* meta = find_meta(*self.impl());
  if (meta && meta->requires_grad && !meta->grad_fn) {
    throw Error(
        std::string(op) +
        ": a leaf tensor that requires grad cannot be modified in place while grad mode "
        "is on (" +
        runtime::in_callers_words("use lt::NoGradGuard", "use `with lazytensor.no_grad():`") +
        ", as optimizers do)");
  }
  if ((meta && meta->grad_fn) || t_operand_requires_grad) {
    throw Error(std::string(op) +
                ": in-place ops do not record gradients; use the out-of-place op on tensors that "
                "require grad (or " +
                runtime::in_callers_words("lt::NoGradGuard", "`with lazytensor.no_grad():`") + ")");
  }
}

}  // namespace autograd

Tensor& Tensor::requires_grad_(bool enable) {
  const runtime::TraceScope scope("requires_grad_");
  if (!defined()) throw Error("requires_grad_: the tensor is undefined");
  const autograd::Meta* meta = find_meta(*impl_);
  if (!enable && meta && meta->grad_fn) {
    throw Error("requires_grad_: only leaf tensors can stop requiring grad; use detach()");
  }
  if (enable && !dtype_is_floating(dtype())) {
    throw Error(std::string("requires_grad_: only floating-point tensors can require grad, not ") +
                dtype_name(dtype()));
  }
  meta_of(*this).requires_grad = enable;
  return *this;
}

bool Tensor::requires_grad() const {
  return defined() && autograd::requires_grad(*this);
}

bool Tensor::is_leaf() const {
  if (!defined()) return true;
  const autograd::Meta* meta = find_meta(*impl_);
  return !meta || !meta->grad_fn;
}

Tensor Tensor::grad() const {
  const autograd::Meta* meta = defined() ? find_meta(*impl_) : nullptr;
  return meta ? meta->grad : Tensor();
}

Tensor& Tensor::mutable_grad() const {
  if (!defined()) throw Error("mutable_grad: the tensor is undefined");
  return meta_of(*this).grad;
}

Tensor Tensor::detach() const {
  const runtime::TraceScope scope("detach");
  if (!defined()) throw Error("detach: the tensor is undefined");
  auto impl = std::make_shared<TensorImpl>(impl_->shape, impl_->dtype, impl_->device);
  if (impl_->data) {
    impl->set_data(impl_->data);
  } else {
    impl->set_ir(impl_->ir);
  }
  if (is_view(*impl_)) trace::state_of(*impl).is_view = true;
  return Tensor(std::move(impl));
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  const runtime::TraceScope scope("backward");
  if (!defined()) throw Error("backward: the tensor is undefined");
  std::shared_ptr<autograd::Function> root = gradient_edge(*this);
  if (!root) {
    throw Error(
        std::string("backward: the tensor does not require grad (no tensor it was computed from "
                    "has requires_grad set, or it was computed under ") +
        runtime::in_callers_words("lt::NoGradGuard", "lazytensor.no_grad()") + ")");
  }
  Tensor seed = gradient;
  if (!seed.defined()) {
    if (numel() != 1) {
      throw Error(
          "backward: a gradient can be implied only for a single-element output; this "
          "tensor has shape " +
          shape().str() + ", so pass backward(gradient)");
    }
    seed = ones_like(*this);
  } else if (seed.shape() != shape()) {
    throw Error("backward: the gradient has shape " + seed.shape().str() +
                " but the tensor has shape " + shape().str());
  }
  run_backward({root}, {seed}, {}, /*accumulate=*/true, retain_graph);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph,
                         bool allow_unused) {
  const runtime::TraceScope scope("grad");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size()) {
    throw Error("grad: " + std::to_string(grad_outputs.size()) + " grad_outputs for " +
                std::to_string(outputs.size()) + " outputs");
  }
  std::vector<std::shared_ptr<autograd::Function>> roots;
  std::vector<Tensor> seeds;
  for (size_t o = 0; o < outputs.size(); ++o) {
    const Tensor& out = outputs[o];
    if (!out.defined()) throw Error("grad: output " + std::to_string(o) + " is undefined");
    std::shared_ptr<autograd::Function> root = gradient_edge(out);
    if (!root) {
      throw Error("grad: output " + std::to_string(o) + " does not require grad");
    }
    Tensor seed = grad_outputs.empty() ? Tensor() : grad_outputs[o];
    if (!seed.defined()) {
      if (out.numel() != 1) {
        throw Error("grad: output " + std::to_string(o) + " has shape " + out.shape().str() +
                    "; a gradient can be implied only for single-element outputs");
      }
      seed = ones_like(out);
    } else if (seed.shape() != out.shape()) {
      throw Error("grad: grad_outputs[" + std::to_string(o) + "] has shape " + seed.shape().str() +
                  " but the output has shape " + out.shape().str());
    }
    roots.push_back(std::move(root));
    seeds.push_back(std::move(seed));
  }
  std::vector<std::shared_ptr<autograd::Function>> captured;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) throw Error("grad: input " + std::to_string(i) + " is undefined");
    std::shared_ptr<autograd::Function> edge = gradient_edge(inputs[i]);
    if (!edge) throw Error("grad: input " + std::to_string(i) + " does not require grad");
    captured.push_back(std::move(edge));
  }
  std::vector<Tensor> results =
      run_backward(roots, seeds, captured, /*accumulate=*/false, retain_graph);
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].defined()) {
      if (results[i].dtype() != inputs[i].dtype()) results[i] = results[i].to(inputs[i].dtype());
      continue;
    }
    if (!allow_unused) {
      throw Error("grad: input " + std::to_string(i) +
                  " was not used to compute the outputs (pass allow_unused to get an undefined "
                  "tensor for it)");
    }
  }
  return results;
}

}  // namespace lt
