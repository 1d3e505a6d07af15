// The Tensor API: each op checks its operands, records IR and returns.
#include "lazytensor/tensor.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/function.h"
#include "backend/backend.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
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

ir::NodePtr with_scalar(const Tensor& a, double s, OpKind kind, const char* op) {
  ir::NodePtr v = value_of(a, op);
  return elementwise(op, kind, {v, scalar(s, v->dtype, *v->device)});
}

ir::NodePtr clamp_node(const Tensor& t, double min, double max, const char* op) {
  ir::NodePtr v = value_of(t, op);
  return elementwise(op, OpKind::Clamp,
                     {v, scalar(min, v->dtype, *v->device), scalar(max, v->dtype, *v->device)});
}

ir::NodePtr lerp_node(const Tensor& t, const Tensor& end, double weight, const char* op) {
  ir::NodePtr v = value_of(t, op), e = value_of(end, op);
  const Device device = trace::common_device(op, {v, e});
  return elementwise(op, OpKind::Lerp, {v, e, scalar(weight, trace::result_dtype({v, e}), device)});
}

ir::NodePtr lerp_node(const Tensor& t, const Tensor& end, const Tensor& weight, const char* op) {
  return elementwise(op, OpKind::Lerp, {value_of(t, op), value_of(end, op), value_of(weight, op)});
}

// a + alpha * b (PyTorch's add with alpha), alpha through the scalar policy.
ir::NodePtr scaled(const Tensor& a, const Tensor& b, double alpha, OpKind kind, const char* op) {
  ir::NodePtr va = value_of(a, op), vb = value_of(b, op);
  trace::broadcast_shapes(op, va->shape, vb->shape);
  const DType dtype = trace::result_dtype({va, vb});
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
  const DType dtype = trace::result_dtype({vs, v1, v2});
  const Device device = trace::common_device(op, {vs, v1, v2});
  ir::NodePtr term =
      elementwise(op, OpKind::Mul, {scalar(value, dtype, device), trace::cast(v1, dtype)});
  term = elementwise(op, kind, {term, trace::cast(v2, dtype)});
  return elementwise(op, OpKind::Add, {vs, term});
}

// Normalizes reduction dims (negative counts from the end) into a mask; checks the range.
uint32_t reduce_mask(const char* op, const Shape& shape, const std::vector<int>& dims) {
  uint32_t mask = 0;
  const int rank = shape.rank();
  // As torch.sum(x, dim=[]): no dims means all of them.
  if (dims.empty()) return rank == 0 ? 0 : static_cast<uint32_t>((uint64_t{1} << rank) - 1);
  for (int dim : dims) {
    const int d = dim < 0 ? dim + rank : dim;
    if (d < 0 || d >= std::max(rank, 1) || (rank == 0 && d != 0)) {
      throw Error(std::string(op) + ": dim " + std::to_string(dim) +
                  " is out of range for a tensor of shape " + shape.str() + " (rank " +
                  std::to_string(rank) + ")");
    }
    if (mask >> d & 1) {
      throw Error(std::string(op) + ": dim " + std::to_string(dim) + " appears more than once");
    }
    mask |= uint32_t{1} << d;
  }
  return rank == 0 ? 0 : mask;
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
  runtime::backend_of(data->device).record_event().wait();  // the step computing it is done
  if (data->buffer->failed()) {
    runtime::settle_failed_step();
    data->buffer->error().raise("host_memory: ");
  }
  return {data->buffer->data(), std::move(owner)};
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

Tensor Tensor::add(const Tensor& other) const {
  const runtime::TraceScope scope("add");
  return table_op("add", OpKind::Add, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Add, "add"), {this, &other});
}
Tensor Tensor::add(const Tensor& other, double alpha) const {
  const runtime::TraceScope scope("add");
  return table_op("add", OpKind::Add, Operands::tensor_tensor_number,
                  scaled(*this, other, alpha, OpKind::Add, "add"), {this, &other}, {alpha});
}
Tensor Tensor::add(double other) const {
  const runtime::TraceScope scope("add");
  return table_op("add", OpKind::Add, Operands::tensor_number,
                  with_scalar(*this, other, OpKind::Add, "add"), {this}, {other});
}
Tensor Tensor::sub(const Tensor& other) const {
  const runtime::TraceScope scope("sub");
  return table_op("sub", OpKind::Sub, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Sub, "sub"), {this, &other});
}
Tensor Tensor::sub(const Tensor& other, double alpha) const {
  const runtime::TraceScope scope("sub");
  return table_op("sub", OpKind::Sub, Operands::tensor_tensor_number,
                  scaled(*this, other, alpha, OpKind::Sub, "sub"), {this, &other}, {alpha});
}
Tensor Tensor::sub(double other) const {
  const runtime::TraceScope scope("sub");
  return table_op("sub", OpKind::Sub, Operands::tensor_number,
                  with_scalar(*this, other, OpKind::Sub, "sub"), {this}, {other});
}
Tensor Tensor::mul(const Tensor& other) const {
  const runtime::TraceScope scope("mul");
  return table_op("mul", OpKind::Mul, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Mul, "mul"), {this, &other});
}
Tensor Tensor::mul(double other) const {
  const runtime::TraceScope scope("mul");
  return table_op("mul", OpKind::Mul, Operands::tensor_number,
                  with_scalar(*this, other, OpKind::Mul, "mul"), {this}, {other});
}
Tensor Tensor::div(const Tensor& other) const {
  const runtime::TraceScope scope("div");
  return table_op("div", OpKind::Div, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Div, "div"), {this, &other});
}
Tensor Tensor::div(double other) const {
  const runtime::TraceScope scope("div");
  return table_op("div", OpKind::Div, Operands::tensor_number,
                  with_scalar(*this, other, OpKind::Div, "div"), {this}, {other});
}
Tensor Tensor::pow(double exponent) const {
  const runtime::TraceScope scope("pow");
  return table_op("pow", OpKind::Pow, Operands::tensor_number,
                  with_scalar(*this, exponent, OpKind::Pow, "pow"), {this}, {exponent});
}
Tensor Tensor::maximum(const Tensor& other) const {
  const runtime::TraceScope scope("maximum");
  return table_op("maximum", OpKind::Maximum, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Maximum, "maximum"), {this, &other});
}
Tensor Tensor::minimum(const Tensor& other) const {
  const runtime::TraceScope scope("minimum");
  return table_op("minimum", OpKind::Minimum, Operands::tensor_tensor,
                  binary(*this, other, OpKind::Minimum, "minimum"), {this, &other});
}
Tensor Tensor::clamp(double min, double max) const {
  const runtime::TraceScope scope("clamp");
  return table_op("clamp", OpKind::Clamp, Operands::tensor_number_number,
                  clamp_node(*this, min, max, "clamp"), {this}, {min, max});
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
Tensor Tensor::neg() const {
  const runtime::TraceScope scope("neg");
  return table_op("neg", OpKind::Neg, Operands::tensor, unary(*this, OpKind::Neg, "neg"), {this});
}
Tensor Tensor::abs() const {
  const runtime::TraceScope scope("abs");
  return table_op("abs", OpKind::Abs, Operands::tensor, unary(*this, OpKind::Abs, "abs"), {this});
}
Tensor Tensor::sqrt() const {
  const runtime::TraceScope scope("sqrt");
  return table_op("sqrt", OpKind::Sqrt, Operands::tensor, unary(*this, OpKind::Sqrt, "sqrt"),
                  {this});
}
Tensor Tensor::rsqrt() const {
  const runtime::TraceScope scope("rsqrt");
  return table_op("rsqrt", OpKind::Rsqrt, Operands::tensor, unary(*this, OpKind::Rsqrt, "rsqrt"),
                  {this});
}
Tensor Tensor::exp() const {
  const runtime::TraceScope scope("exp");
  return table_op("exp", OpKind::Exp, Operands::tensor, unary(*this, OpKind::Exp, "exp"), {this});
}
Tensor Tensor::log() const {
  const runtime::TraceScope scope("log");
  return table_op("log", OpKind::Log, Operands::tensor, unary(*this, OpKind::Log, "log"), {this});
}
Tensor Tensor::tanh() const {
  const runtime::TraceScope scope("tanh");
  return table_op("tanh", OpKind::Tanh, Operands::tensor, unary(*this, OpKind::Tanh, "tanh"),
                  {this});
}
Tensor Tensor::sigmoid() const {
  const runtime::TraceScope scope("sigmoid");
  return table_op("sigmoid", OpKind::Sigmoid, Operands::tensor,
                  unary(*this, OpKind::Sigmoid, "sigmoid"), {this});
}
Tensor Tensor::relu() const {
  const runtime::TraceScope scope("relu");
  return table_op("relu", OpKind::Relu, Operands::tensor, unary(*this, OpKind::Relu, "relu"),
                  {this});
}
Tensor Tensor::erf() const {
  const runtime::TraceScope scope("erf");
  return table_op("erf", OpKind::Erf, Operands::tensor, unary(*this, OpKind::Erf, "erf"), {this});
}
Tensor Tensor::sign() const {
  const runtime::TraceScope scope("sign");
  return trace::make_tensor(unary(*this, OpKind::Sign, "sign"));
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

Tensor& Tensor::add_(const Tensor& other) {
  const runtime::TraceScope scope("add_");
  return trace::assign(*this, binary(*this, other, OpKind::Add, "add_"), "add_");
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  const runtime::TraceScope scope("add_");
  return trace::assign(*this, scaled(*this, other, alpha, OpKind::Add, "add_"), "add_");
}
Tensor& Tensor::add_(double other) {
  const runtime::TraceScope scope("add_");
  return trace::assign(*this, with_scalar(*this, other, OpKind::Add, "add_"), "add_");
}
Tensor& Tensor::sub_(const Tensor& other) {
  const runtime::TraceScope scope("sub_");
  return trace::assign(*this, binary(*this, other, OpKind::Sub, "sub_"), "sub_");
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  const runtime::TraceScope scope("sub_");
  return trace::assign(*this, scaled(*this, other, alpha, OpKind::Sub, "sub_"), "sub_");
}
Tensor& Tensor::sub_(double other) {
  const runtime::TraceScope scope("sub_");
  return trace::assign(*this, with_scalar(*this, other, OpKind::Sub, "sub_"), "sub_");
}
Tensor& Tensor::mul_(const Tensor& other) {
  const runtime::TraceScope scope("mul_");
  return trace::assign(*this, binary(*this, other, OpKind::Mul, "mul_"), "mul_");
}
Tensor& Tensor::mul_(double other) {
  const runtime::TraceScope scope("mul_");
  return trace::assign(*this, with_scalar(*this, other, OpKind::Mul, "mul_"), "mul_");
}
Tensor& Tensor::div_(const Tensor& other) {
  const runtime::TraceScope scope("div_");
  return trace::assign(*this, binary(*this, other, OpKind::Div, "div_"), "div_");
}
Tensor& Tensor::div_(double other) {
  const runtime::TraceScope scope("div_");
  return trace::assign(*this, with_scalar(*this, other, OpKind::Div, "div_"), "div_");
}
Tensor& Tensor::pow_(double exponent) {
  const runtime::TraceScope scope("pow_");
  return trace::assign(*this, with_scalar(*this, exponent, OpKind::Pow, "pow_"), "pow_");
}
Tensor& Tensor::clamp_(double min, double max) {
  const runtime::TraceScope scope("clamp_");
  return trace::assign(*this, clamp_node(*this, min, max, "clamp_"), "clamp_");
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
Tensor& Tensor::neg_() {
  const runtime::TraceScope scope("neg_");
  return trace::assign(*this, unary(*this, OpKind::Neg, "neg_"), "neg_");
}
Tensor& Tensor::abs_() {
  const runtime::TraceScope scope("abs_");
  return trace::assign(*this, unary(*this, OpKind::Abs, "abs_"), "abs_");
}
Tensor& Tensor::sqrt_() {
  const runtime::TraceScope scope("sqrt_");
  return trace::assign(*this, unary(*this, OpKind::Sqrt, "sqrt_"), "sqrt_");
}
Tensor& Tensor::rsqrt_() {
  const runtime::TraceScope scope("rsqrt_");
  return trace::assign(*this, unary(*this, OpKind::Rsqrt, "rsqrt_"), "rsqrt_");
}
Tensor& Tensor::exp_() {
  const runtime::TraceScope scope("exp_");
  return trace::assign(*this, unary(*this, OpKind::Exp, "exp_"), "exp_");
}
Tensor& Tensor::log_() {
  const runtime::TraceScope scope("log_");
  return trace::assign(*this, unary(*this, OpKind::Log, "log_"), "log_");
}
Tensor& Tensor::tanh_() {
  const runtime::TraceScope scope("tanh_");
  return trace::assign(*this, unary(*this, OpKind::Tanh, "tanh_"), "tanh_");
}
Tensor& Tensor::sigmoid_() {
  const runtime::TraceScope scope("sigmoid_");
  return trace::assign(*this, unary(*this, OpKind::Sigmoid, "sigmoid_"), "sigmoid_");
}
Tensor& Tensor::relu_() {
  const runtime::TraceScope scope("relu_");
  return trace::assign(*this, unary(*this, OpKind::Relu, "relu_"), "relu_");
}
Tensor& Tensor::maximum_(const Tensor& other) {
  const runtime::TraceScope scope("maximum_");
  return trace::assign(*this, binary(*this, other, OpKind::Maximum, "maximum_"), "maximum_");
}
Tensor& Tensor::minimum_(const Tensor& other) {
  const runtime::TraceScope scope("minimum_");
  return trace::assign(*this, binary(*this, other, OpKind::Minimum, "minimum_"), "minimum_");
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

Tensor Tensor::sum() const {
  const runtime::TraceScope scope("sum");
  return reduce(*this, OpKind::Sum, "sum", all_dims(checked(*this, "sum")), false);
}
Tensor Tensor::sum(const std::vector<int>& dims, bool keepdim) const {
  const runtime::TraceScope scope("sum");
  return reduce(*this, OpKind::Sum, "sum", reduce_mask("sum", checked(*this, "sum").shape(), dims),
                keepdim);
}
Tensor Tensor::mean() const {
  const runtime::TraceScope scope("mean");
  return reduce(*this, OpKind::Mean, "mean", all_dims(checked(*this, "mean")), false);
}
Tensor Tensor::mean(const std::vector<int>& dims, bool keepdim) const {
  const runtime::TraceScope scope("mean");
  return reduce(*this, OpKind::Mean, "mean",
                reduce_mask("mean", checked(*this, "mean").shape(), dims), keepdim);
}
Tensor Tensor::max() const {
  const runtime::TraceScope scope("max");
  return reduce(*this, OpKind::Max, "max", all_dims(checked(*this, "max")), false);
}
Tensor Tensor::max(const std::vector<int>& dims, bool keepdim) const {
  const runtime::TraceScope scope("max");
  return reduce(*this, OpKind::Max, "max", reduce_mask("max", checked(*this, "max").shape(), dims),
                keepdim);
}
Tensor Tensor::norm() const {
  const runtime::TraceScope scope("norm");
  return reduce(*this, OpKind::Norm, "norm", all_dims(checked(*this, "norm")), false);
}
Tensor Tensor::norm(const std::vector<int>& dims, bool keepdim) const {
  const runtime::TraceScope scope("norm");
  return reduce(*this, OpKind::Norm, "norm",
                reduce_mask("norm", checked(*this, "norm").shape(), dims), keepdim);
}

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  const runtime::TraceScope scope("add");
  return alpha == 1.0 ? a.add(b) : a.add(b, alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  const runtime::TraceScope scope("sub");
  return alpha == 1.0 ? a.sub(b) : a.sub(b, alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("mul");
  return a.mul(b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("div");
  return a.div(b);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("maximum");
  return a.maximum(b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("minimum");
  return a.minimum(b);
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("add");
  return a.add(b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("sub");
  return a.sub(b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("mul");
  return a.mul(b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("div");
  return a.div(b);
}
Tensor operator+(const Tensor& a, double b) {
  const runtime::TraceScope scope("add");
  return a.add(b);
}
Tensor operator-(const Tensor& a, double b) {
  const runtime::TraceScope scope("sub");
  return a.sub(b);
}
Tensor operator*(const Tensor& a, double b) {
  const runtime::TraceScope scope("mul");
  return a.mul(b);
}
Tensor operator/(const Tensor& a, double b) {
  const runtime::TraceScope scope("div");
  return a.div(b);
}
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
