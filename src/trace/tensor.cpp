// The Tensor API: each op checks its operands, records IR and returns.
#include "lazytensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/function.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "runtime/device.h"
#include "runtime/device_data.h"
#include "runtime/graph_executor.h"
#include "runtime/step_journal.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"

namespace lt {

using autograd::Gradients;
using ir::OpKind;
using trace::elementwise;
using trace::reduce_mask;
using trace::scalar;
using trace::value_of;

namespace {

const Tensor& checked(const Tensor& t, const char* op) {
  if (!t.defined()) throw Error(std::string(op) + ": the tensor is undefined");
  return t;
}

ir::NodePtr unary(const Tensor& t, OpKind kind, const char* op) {
  return elementwise(op, kind, {value_of(t, op)});
}

ir::NodePtr binary(const Tensor& a, const Tensor& b, OpKind kind, const char* op) {
  return elementwise(op, kind, {value_of(a, op), value_of(b, op)});
}

// The dtype a number meets a tensor of `dtype` in, for op `kind`: as in PyTorch, a number is
// of a higher category than bool (mask * 2 counts in i64), and an op defined on floating values
// takes an integer tensor and its number as f32 (ids / 2). An integer op keeps its tensor's
// integer dtype, so a number it cannot hold (a fraction, 1e20, infinity) is refused rather than
// computed wrong (the Python API promotes the tensor for a float number, as PyTorch does).
DType number_dtype(const char* op, OpKind kind, DType dtype,
                   std::initializer_list<double> numbers) {
  const DType computed =
      trace::kernel_dtype(op, kind, dtype == DType::boolean ? DType::i64 : dtype);
  if (dtype_is_floating(computed)) return computed;
  for (double s : numbers) {
    if (!trace::holds_number(computed, s)) {
      char text[32];
      std::snprintf(text, sizeof(text), "%g", s);
      throw Error(std::string(op) + ": the number " + text + " is not a value of " +
                  dtype_name(computed) + " (the tensor is " + dtype_name(dtype) +
                  "); cast the tensor to a floating dtype first");
    }
  }
  return computed;
}

ir::NodePtr with_scalar(const Tensor& a, double s, OpKind kind, const char* op) {
  ir::NodePtr v = value_of(a, op);
  const DType dtype = number_dtype(op, kind, v->dtype, {s});
  return elementwise(op, kind, {trace::cast(v, dtype), scalar(s, dtype, *v->device)});
}

// t (kind) two numbers, as clamp's min and max or an activation's parameters.
ir::NodePtr with_scalars(const Tensor& t, double s0, double s1, OpKind kind, const char* op) {
  ir::NodePtr v = value_of(t, op);
  const DType dtype = number_dtype(op, kind, v->dtype, {s0, s1});
  return elementwise(
      op, kind,
      {trace::cast(v, dtype), scalar(s0, dtype, *v->device), scalar(s1, dtype, *v->device)});
}

ir::NodePtr lerp_node(const Tensor& t, const Tensor& end, double weight, const char* op) {
  ir::NodePtr v = value_of(t, op), e = value_of(end, op);
  trace::check_floating(op, trace::result_dtype({v, e}));
  const Device device = trace::common_device(op, {v, e});
  return elementwise(op, OpKind::Lerp, {v, e, scalar(weight, trace::result_dtype({v, e}), device)});
}

ir::NodePtr lerp_node(const Tensor& t, const Tensor& end, const Tensor& weight, const char* op) {
  return elementwise(op, OpKind::Lerp, {value_of(t, op), value_of(end, op), value_of(weight, op)});
}

// a + alpha * b (PyTorch's add with alpha), alpha through the scalar policy.
ir::NodePtr scaled(const Tensor& a, const Tensor& b, double alpha, OpKind kind, const char* op) {
  ir::NodePtr va = value_of(a, op), vb = value_of(b, op);
  // Two bool tensors add as bool (or), as PyTorch's; a scale other than 1 counts in i64.
  if (alpha == 1.0 && trace::result_dtype({va, vb}) == DType::boolean) {
    return elementwise(op, kind, {va, vb});
  }
  trace::broadcast_shapes(op, va->shape, vb->shape);
  const DType dtype = number_dtype(op, kind, trace::result_dtype({va, vb}), {alpha});
  const Device device = trace::common_device(op, {va, vb});
  ir::NodePtr scaled_b =
      elementwise(op, OpKind::Mul, {trace::cast(vb, dtype), scalar(alpha, dtype, device)});
  return elementwise(op, kind, {va, scaled_b});
}

// self + value * t1 (*|/) t2, as torch.addcmul / torch.addcdiv.
ir::NodePtr addc(const Tensor& self, const Tensor& t1, const Tensor& t2, double value, OpKind kind,
                 const char* op) {
  ir::NodePtr vs = value_of(self, op), v1 = value_of(t1, op), v2 = value_of(t2, op);
  // Check every shape before building anything, so the message names all three.
  trace::broadcast_shapes(op, trace::broadcast_shapes(op, vs->shape, v1->shape), v2->shape);
  const DType dtype = number_dtype(op, kind, trace::result_dtype({vs, v1, v2}), {value});
  const Device device = trace::common_device(op, {vs, v1, v2});
  ir::NodePtr term =
      elementwise(op, OpKind::Mul, {scalar(value, dtype, device), trace::cast(v1, dtype)});
  term = elementwise(op, kind, {term, trace::cast(v2, dtype)});
  return elementwise(op, OpKind::Add, {vs, term});
}

std::vector<int> mask_dims(uint32_t mask, int rank) {
  std::vector<int> dims;
  for (int d = 0; d < rank; ++d) {
    if (mask >> d & 1) dims.push_back(d);
  }
  return dims;
}

Tensor unreduce(const Tensor& g, const Shape& shape, uint32_t mask, bool keepdim);

Tensor reduce(const Tensor& t, OpKind kind, const char* op, uint32_t mask, bool keepdim) {
  ir::NodePtr v = value_of(t, op);
  // As PyTorch: integer and bool sums are i64 counts (kernels fold them in f64, exact while
  // every partial sum is below 2^53 in magnitude), a bool max is an any(), and means and norms
  // are defined on floating values only.
  if (!dtype_is_floating(v->dtype)) {
    if (kind == OpKind::Mean || kind == OpKind::Norm) trace::check_floating(op, v->dtype);
    if (kind == OpKind::Sum && v->dtype != DType::i64) {
      return reduce(t.to(DType::i64), kind, op, mask, keepdim);
    }
    if (v->dtype == DType::boolean) {
      return reduce(t.to(DType::i64), kind, op, mask, keepdim).to(DType::boolean);
    }
  }
  trace::check_arithmetic(op, v->dtype);
  std::vector<int64_t> dims;
  int64_t reduced = 1;
  for (int d = 0; d < v->shape.rank(); ++d) {
    if (mask >> d & 1) {
      reduced *= v->shape[d];
      if (keepdim) dims.push_back(1);
    } else {
      dims.push_back(v->shape[d]);
    }
  }
  if (kind == OpKind::Max && reduced == 0) {
    throw Error(std::string(op) + ": cannot take the max over zero elements (shape " +
                v->shape.str() + ")");
  }
  Tensor out = trace::make_tensor(ir::make_reduction(kind, v, mask, keepdim, Shape(dims)));
  if (!autograd::needs_grad({&t})) return out;
  return autograd::record(
      op, out, {&t},
      [kind, mask, keepdim, reduced, x = autograd::saved(t),
       y = autograd::saved(out)](const Tensor& g) {
        const Shape& shape = x.shape();
        switch (kind) {
          case OpKind::Mean:
            return Gradients{unreduce(g, shape, mask, keepdim) / static_cast<double>(reduced)};
          case OpKind::Max: {
            // Ties share the gradient evenly, as torch.amax.
            const Tensor hits = autograd::indicator(x.eq(unreduce(y, shape, mask, keepdim)), x);
            const Tensor count =
                unreduce(hits.sum(mask_dims(mask, shape.rank()), true), shape, mask, true);
            return Gradients{unreduce(g, shape, mask, keepdim) * hits / count};
          }
          case OpKind::Norm: {
            // d|x|/dx = x / |x|, taken as 0 where the norm is 0 (as PyTorch).
            const Tensor norm = unreduce(y, shape, mask, keepdim);
            const Tensor zero = zeros_like(norm);
            return Gradients{unreduce(g, shape, mask, keepdim) *
                             where(norm.eq(0.0), zero, x / norm)};
          }
          default:
            return Gradients{unreduce(g, shape, mask, keepdim)};
        }
      });
}

uint32_t all_dims(const Tensor& t) {
  return t.dim() == 0 ? 0 : static_cast<uint32_t>((uint64_t{1} << t.dim()) - 1);
}

using autograd::Operands;

// A table op's result, its gradient recorded as the op's row of derivatives.def when one flows.
Tensor table_op(const char* op, OpKind kind, Operands operands, ir::NodePtr node,
                std::initializer_list<const Tensor*> tensors,
                std::initializer_list<double> numbers = {}) {
  Tensor out = trace::make_tensor(std::move(node));
  if (!autograd::needs_grad(tensors)) return out;
  return autograd::record(kind, operands, op, std::move(out), tensors, numbers);
}

// A gradient of a reduction's result spread back over the reduced dims of `shape`.
Tensor unreduce(const Tensor& g, const Shape& shape, uint32_t mask, bool keepdim) {
  Tensor out = g;
  if (!keepdim) {
    for (int d = 0; d < shape.rank(); ++d) {
      if (mask >> d & 1) out = out.unsqueeze(d);
    }
  }
  return out.expand(shape.to_vector());
}

}  // namespace

const Shape& Tensor::shape() const {
  return checked(*this, "shape").impl()->shape;
}
DType Tensor::dtype() const {
  return checked(*this, "dtype").impl()->dtype;
}
Device Tensor::device() const {
  return checked(*this, "device").impl()->device;
}
bool Tensor::is_pending() const {
  if (!impl_) return false;
  // A cut on another thread may rebind it.
  const runtime::TraceScope scope("is_pending", runtime::TraceScope::Purpose::read);
  return impl_->ir != nullptr;
}

void Tensor::to_host(void* dst) const {
  checked(*this, "to_host");
  runtime::DeviceDataPtr data;
  {
    // A computed value is read without stopping other threads; a pending one needs a cut.
    const runtime::TraceScope scope("to_host", runtime::TraceScope::Purpose::read);
    data = impl_->data;
  }
  if (!data) data = runtime::sync_tensors({impl_}, "to_host");
  runtime::download(*data, dst);
}

Tensor::HostMemory Tensor::host_memory() const {
  checked(*this, "host_memory");
  if (device().type != DeviceType::cpu) {
    throw Error("host_memory: the value is on " + device().str() + ", not in host memory");
  }
  runtime::DeviceDataPtr data;
  {
    const runtime::TraceScope scope("host_memory", runtime::TraceScope::Purpose::read);
    data = impl_->data;
  }
  if (!data) data = runtime::sync_tensors({impl_}, "host_memory");
  // Held from here on, so no later step takes the buffer over for an output.
  data->holders.fetch_add(1);
  std::shared_ptr<void> owner(new runtime::DeviceDataPtr(data), [](void* p) {
    auto* held = static_cast<runtime::DeviceDataPtr*>(p);
    (*held)->holders.fetch_sub(1);
    delete held;
  });
  return {runtime::host_address(*data, "host_memory"), std::move(owner)};
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  checked(*this, "to_vector");
  return visit_dtype(dtype(), [&](auto tag) {
    using Stored = typename decltype(tag)::type;
    const int64_t n = numel();
    std::unique_ptr<Stored[]> host(new Stored[n]);
    to_host(host.get());
    std::vector<T> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = convert_element<T>(host[i]);
    return out;
  });
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

double Tensor::item() const {
  if (checked(*this, "item").numel() != 1) {
    throw Error("item: a tensor with " + std::to_string(numel()) + " elements (shape " +
                shape().str() + ") cannot be converted to a number");
  }
  return to_vector<double>()[0];
}

// The ops of elementwise_ops.def. Each recording is one node of the row's OpKind, its gradient
// that op's row of derivatives.def; in-place forms build the same node and rebind the tensor.
#define LT_TENSOR_OPERAND_METHODS(name, Kind)                                              \
  Tensor Tensor::name(const Tensor& other) const {                                         \
    const runtime::TraceScope scope(#name);                                                \
    return table_op(#name, OpKind::Kind, Operands::tensor_tensor,                          \
                    binary(*this, other, OpKind::Kind, #name), {this, &other});            \
  }                                                                                        \
  Tensor& Tensor::name##_(const Tensor& other) {                                           \
    const runtime::TraceScope scope(#name "_");                                            \
    return trace::assign(*this, binary(*this, other, OpKind::Kind, #name "_"), #name "_"); \
  }
#define LT_BINARY_FUNCTION(name)                  \
  Tensor name(const Tensor& a, const Tensor& b) { \
    const runtime::TraceScope scope(#name);       \
    return a.name(b);                             \
  }
#define LT_BINARY_METHODS(name, Kind)                                                           \
  LT_TENSOR_OPERAND_METHODS(name, Kind)                                                         \
  Tensor Tensor::name(double other) const {                                                     \
    const runtime::TraceScope scope(#name);                                                     \
    return table_op(#name, OpKind::Kind, Operands::tensor_number,                               \
                    with_scalar(*this, other, OpKind::Kind, #name), {this}, {other});           \
  }                                                                                             \
  Tensor& Tensor::name##_(double other) {                                                       \
    const runtime::TraceScope scope(#name "_");                                                 \
    return trace::assign(*this, with_scalar(*this, other, OpKind::Kind, #name "_"), #name "_"); \
  }
#define LT_BINARY_OP(name, Kind) \
  LT_BINARY_METHODS(name, Kind)  \
  LT_BINARY_FUNCTION(name)
// a (Kind) alpha * b, alpha through the scalar policy, as torch.add(input, other, alpha=...).
#define LT_BINARY_ALPHA_OP(name, Kind)                                                            \
  LT_BINARY_METHODS(name, Kind)                                                                   \
  Tensor Tensor::name(const Tensor& other, double alpha) const {                                  \
    const runtime::TraceScope scope(#name);                                                       \
    return table_op(#name, OpKind::Kind, Operands::tensor_tensor_number,                          \
                    scaled(*this, other, alpha, OpKind::Kind, #name), {this, &other}, {alpha});   \
  }                                                                                               \
  Tensor& Tensor::name##_(const Tensor& other, double alpha) {                                    \
    const runtime::TraceScope scope(#name "_");                                                   \
    return trace::assign(*this, scaled(*this, other, alpha, OpKind::Kind, #name "_"), #name "_"); \
  }                                                                                               \
  Tensor name(const Tensor& a, const Tensor& b, double alpha) {                                   \
    const runtime::TraceScope scope(#name);                                                       \
    return alpha == 1.0 ? a.name(b) : a.name(b, alpha);                                           \
  }
#define LT_ELEMENTWISE_EXTREMUM(name, Kind) \
  LT_TENSOR_OPERAND_METHODS(name, Kind)     \
  LT_BINARY_FUNCTION(name)
#define LT_UNARY_METHOD(name, Kind)                                                           \
  Tensor Tensor::name() const {                                                               \
    const runtime::TraceScope scope(#name);                                                   \
    return table_op(#name, OpKind::Kind, Operands::tensor, unary(*this, OpKind::Kind, #name), \
                    {this});                                                                  \
  }
#define LT_UNARY_OP(name, Kind)                                                    \
  LT_UNARY_METHOD(name, Kind)                                                      \
  Tensor& Tensor::name##_() {                                                      \
    const runtime::TraceScope scope(#name "_");                                    \
    return trace::assign(*this, unary(*this, OpKind::Kind, #name "_"), #name "_"); \
  }
#define LT_UNARY_FUNCTION(name, Kind) \
  LT_UNARY_METHOD(name, Kind)         \
  Tensor name(const Tensor& x) {      \
    return x.name();                  \
  }
#define LT_UNARY_NO_GRAD(name, Kind)                              \
  Tensor Tensor::name() const {                                   \
    const runtime::TraceScope scope(#name);                       \
    return trace::make_tensor(unary(*this, OpKind::Kind, #name)); \
  }
// Activations are defined on floating-point tensors only, as in torch.nn.functional.
#define LT_ACTIVATION(name, Kind, p0, d0, p1, d1)                                   \
  Tensor name(const Tensor& x, double p0, double p1) {                              \
    const runtime::TraceScope scope(#name);                                         \
    if (!dtype_is_floating(value_of(x, #name)->dtype)) {                            \
      throw Error(std::string(#name) + ": expected a floating-point tensor, got " + \
                  dtype_name(x.dtype()));                                           \
    }                                                                               \
    return table_op(#name, OpKind::Kind, Operands::tensor_number_number,            \
                    with_scalars(x, p0, p1, OpKind::Kind, #name), {&x}, {p0, p1});  \
  }
#include "lazytensor/elementwise_ops.def"
#undef LT_BINARY_METHODS
#undef LT_BINARY_FUNCTION
#undef LT_TENSOR_OPERAND_METHODS
#undef LT_UNARY_METHOD

Tensor Tensor::pow(double exponent) const {
  const runtime::TraceScope scope("pow");
  return table_op("pow", OpKind::Pow, Operands::tensor_number,
                  with_scalar(*this, exponent, OpKind::Pow, "pow"), {this}, {exponent});
}
Tensor Tensor::clamp(double min, double max) const {
  const runtime::TraceScope scope("clamp");
  return table_op("clamp", OpKind::Clamp, Operands::tensor_number_number,
                  with_scalars(*this, min, max, OpKind::Clamp, "clamp"), {this}, {min, max});
}
Tensor Tensor::clamp_min(double min) const {
  const runtime::TraceScope scope("clamp_min");
  return table_op("clamp_min", OpKind::Maximum, Operands::tensor_number,
                  with_scalar(*this, min, OpKind::Maximum, "clamp_min"), {this}, {min});
}
Tensor Tensor::clamp_max(double max) const {
  const runtime::TraceScope scope("clamp_max");
  return table_op("clamp_max", OpKind::Minimum, Operands::tensor_number,
                  with_scalar(*this, max, OpKind::Minimum, "clamp_max"), {this}, {max});
}
Tensor Tensor::lerp(const Tensor& end, double weight) const {
  const runtime::TraceScope scope("lerp");
  return table_op("lerp", OpKind::Lerp, Operands::tensor_tensor_number,
                  lerp_node(*this, end, weight, "lerp"), {this, &end}, {weight});
}
Tensor Tensor::lerp(const Tensor& end, const Tensor& weight) const {
  const runtime::TraceScope scope("lerp");
  return table_op("lerp", OpKind::Lerp, Operands::tensor_tensor_tensor,
                  lerp_node(*this, end, weight, "lerp"), {this, &end, &weight});
}
Tensor Tensor::addcmul(const Tensor& tensor1, const Tensor& tensor2, double value) const {
  const runtime::TraceScope scope("addcmul");
  Tensor out = trace::make_tensor(addc(*this, tensor1, tensor2, value, OpKind::Mul, "addcmul"));
  if (!autograd::needs_grad({this, &tensor1, &tensor2})) return out;
  return autograd::record("addcmul", out, {this, &tensor1, &tensor2},
                          [s = shape(), t1 = autograd::saved(tensor1),
                           t2 = autograd::saved(tensor2), value](const Tensor& g) {
                            return Gradients{autograd::sum_to(g, s),
                                             autograd::sum_to(g * t2 * value, t1.shape()),
                                             autograd::sum_to(g * t1 * value, t2.shape())};
                          });
}
Tensor Tensor::addcdiv(const Tensor& tensor1, const Tensor& tensor2, double value) const {
  const runtime::TraceScope scope("addcdiv");
  Tensor out = trace::make_tensor(addc(*this, tensor1, tensor2, value, OpKind::Div, "addcdiv"));
  if (!autograd::needs_grad({this, &tensor1, &tensor2})) return out;
  return autograd::record(
      "addcdiv", out, {this, &tensor1, &tensor2},
      [s = shape(), t1 = autograd::saved(tensor1), t2 = autograd::saved(tensor2),
       value](const Tensor& g) {
        return Gradients{autograd::sum_to(g, s), autograd::sum_to(g / t2 * value, t1.shape()),
                         autograd::sum_to((g * t1 / (t2 * t2) * -value), t2.shape())};
      });
}
Tensor Tensor::clone() const {
  const runtime::TraceScope scope("clone");
  return table_op("clone", OpKind::Identity, Operands::tensor,
                  unary(*this, OpKind::Identity, "clone"), {this});
}

Tensor Tensor::to(DType dtype) const {
  const runtime::TraceScope scope("to");
  trace::check_dtype("to", dtype);
  ir::NodePtr v = value_of(*this, "to");
  if (v->dtype == dtype) return *this;  // as torch: the same tensor
  Tensor out = trace::make_tensor(trace::cast(v, dtype));
  if (!autograd::needs_grad({this}) || !dtype_is_floating(dtype)) return out;
  return autograd::record("to", out, {this},
                          [from = v->dtype](const Tensor& g) { return Gradients{g.to(from)}; });
}

Tensor& Tensor::pow_(double exponent) {
  const runtime::TraceScope scope("pow_");
  return trace::assign(*this, with_scalar(*this, exponent, OpKind::Pow, "pow_"), "pow_");
}
Tensor& Tensor::clamp_(double min, double max) {
  const runtime::TraceScope scope("clamp_");
  return trace::assign(*this, with_scalars(*this, min, max, OpKind::Clamp, "clamp_"), "clamp_");
}
Tensor& Tensor::clamp_min_(double min) {
  const runtime::TraceScope scope("clamp_min_");
  return trace::assign(*this, with_scalar(*this, min, OpKind::Maximum, "clamp_min_"), "clamp_min_");
}
Tensor& Tensor::clamp_max_(double max) {
  const runtime::TraceScope scope("clamp_max_");
  return trace::assign(*this, with_scalar(*this, max, OpKind::Minimum, "clamp_max_"), "clamp_max_");
}
Tensor& Tensor::lerp_(const Tensor& end, double weight) {
  const runtime::TraceScope scope("lerp_");
  return trace::assign(*this, lerp_node(*this, end, weight, "lerp_"), "lerp_");
}
Tensor& Tensor::lerp_(const Tensor& end, const Tensor& weight) {
  const runtime::TraceScope scope("lerp_");
  return trace::assign(*this, lerp_node(*this, end, weight, "lerp_"), "lerp_");
}
Tensor& Tensor::addcmul_(const Tensor& tensor1, const Tensor& tensor2, double value) {
  const runtime::TraceScope scope("addcmul_");
  return trace::assign(*this, addc(*this, tensor1, tensor2, value, OpKind::Mul, "addcmul_"),
                       "addcmul_");
}
Tensor& Tensor::addcdiv_(const Tensor& tensor1, const Tensor& tensor2, double value) {
  const runtime::TraceScope scope("addcdiv_");
  return trace::assign(*this, addc(*this, tensor1, tensor2, value, OpKind::Div, "addcdiv_"),
                       "addcdiv_");
}
Tensor& Tensor::copy_(const Tensor& src) {
  const runtime::TraceScope scope("copy_");
  ir::NodePtr self = value_of(*this, "copy_");
  ir::NodePtr from = value_of(src, "copy_");
  trace::common_device("copy_", {self, from});
  ir::NodePtr v = trace::cast(from, self->dtype);
  if (v->shape != self->shape) v = trace::expand("copy_", v, self->shape, *self->device);
  return trace::assign(*this, v, "copy_");
}
Tensor& Tensor::zero_() {
  const runtime::TraceScope scope("zero_");
  return fill_(0.0);
}
Tensor& Tensor::fill_(double value) {
  const runtime::TraceScope scope("fill_");
  ir::NodePtr self = value_of(*this, "fill_");
  return trace::assign(
      *this,
      trace::expand("fill_", scalar(value, self->dtype, *self->device), self->shape, *self->device),
      "fill_");
}

// The reductions over every dim or the given ones, each named once.
#define LT_REDUCTION(name, Kind)                                                       \
  Tensor Tensor::name() const {                                                        \
    const runtime::TraceScope scope(#name);                                            \
    return reduce(*this, OpKind::Kind, #name, all_dims(checked(*this, #name)), false); \
  }                                                                                    \
  Tensor Tensor::name(const std::vector<int>& dims, bool keepdim) const {              \
    const runtime::TraceScope scope(#name);                                            \
    return reduce(*this, OpKind::Kind, #name,                                          \
                  reduce_mask(#name, checked(*this, #name).shape(), dims), keepdim);   \
  }
LT_REDUCTION(sum, Sum)
LT_REDUCTION(mean, Mean)
LT_REDUCTION(max, Max)
LT_REDUCTION(norm, Norm)
#undef LT_REDUCTION

// The operators are their ops, with one scope each, as the named forms.
#define LT_OPERATOR(symbol, name)                            \
  Tensor operator symbol(const Tensor& a, const Tensor& b) { \
    const runtime::TraceScope scope(#name);                  \
    return a.name(b);                                        \
  }                                                          \
  Tensor operator symbol(const Tensor& a, double b) {        \
    const runtime::TraceScope scope(#name);                  \
    return a.name(b);                                        \
  }
LT_OPERATOR(+, add)
LT_OPERATOR(-, sub)
LT_OPERATOR(*, mul)
LT_OPERATOR(/, div)
#undef LT_OPERATOR
Tensor operator+(double a, const Tensor& b) {
  const runtime::TraceScope scope("add");
  return b.add(a);
}
Tensor operator-(double a, const Tensor& b) {
  const runtime::TraceScope scope("sub");
  return b.neg().add(a);
}
Tensor operator*(double a, const Tensor& b) {
  const runtime::TraceScope scope("mul");
  return b.mul(a);
}
Tensor operator/(double a, const Tensor& b) {
  const runtime::TraceScope scope("div");
  ir::NodePtr v = value_of(b, "div");
  return table_op("div", OpKind::Div, Operands::number_tensor,
                  elementwise("div", OpKind::Div, {scalar(a, v->dtype, *v->device), v}), {&b}, {a});
}
Tensor operator-(const Tensor& a) {
  const runtime::TraceScope scope("neg");
  return a.neg();
}

}  // namespace lt
