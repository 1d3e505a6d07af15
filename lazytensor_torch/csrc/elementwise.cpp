// Elementwise ops, comparisons, fills and clones on the device, with PyTorch's type promotion
// (at::result_type). A Python number or CPU rank-0 tensor operand is passed to the engine as a
// number, which the scalar policy turns into a kernel argument by default.
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include "storage.h"

namespace lazytensor_torch {
namespace {

// The dtype the engine computes a result of PyTorch dtype `result` in: its own when the engine
// has arithmetic for it, else f64 (integers and bool, exact to 2^53), cast back at the end.
lt::DType compute_dtype(at::ScalarType result) {
  const lt::DType dtype = to_engine(result, "lazytensor");
  return lt::dtype_is_floating(dtype) ? dtype : lt::DType::f64;
}

lt::Tensor in(const Operand& o, lt::DType dtype) {
  return o.tensor.dtype() == dtype ? o.tensor : o.tensor.to(dtype);
}

lt::Tensor finish(const lt::Tensor& value, at::ScalarType result) {
  const lt::DType dtype = to_engine(result, "lazytensor");
  return value.dtype() == dtype ? value : value.to(dtype);
}

enum class Arith { add, sub, mul, div };

// x op (alpha * y), with either side possibly a number.
lt::Tensor arith(Arith op, const Operand& x, const Operand& y, lt::DType dtype, double alpha) {
  if (x.number) {
    const lt::Tensor b = alpha == 1.0 ? in(y, dtype) : in(y, dtype) * alpha;
    switch (op) {
      case Arith::add:
        return *x.number + b;
      case Arith::sub:
        return *x.number - b;
      case Arith::mul:
        return *x.number * b;
      case Arith::div:
        return *x.number / b;
    }
  }
  const lt::Tensor a = in(x, dtype);
  if (y.number) {
    const double b = *y.number * alpha;
    switch (op) {
      case Arith::add:
        return a + b;
      case Arith::sub:
        return a - b;
      case Arith::mul:
        return a * b;
      case Arith::div:
        return a / b;
    }
  }
  const lt::Tensor b = in(y, dtype);
  switch (op) {
    case Arith::add:
      return alpha == 1.0 ? a + b : a.add(b, alpha);
    case Arith::sub:
      return alpha == 1.0 ? a - b : a.sub(b, alpha);
    case Arith::mul:
      return a * b;
    case Arith::div:
      return a / b;
  }
  TORCH_CHECK(false, "lazytensor: unknown arithmetic op");
}

// PyTorch's result dtype over several operands (numbers and rank-0 tensors rank lower).
at::ScalarType result_type(std::initializer_list<at::Tensor> operands) {
  at::native::ResultTypeState state{};
  for (const at::Tensor& t : operands) state = at::native::update_result_type_state(t, state);
  return at::native::result_type(state);
}

at::ScalarType arith_result(Arith op, const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType type = at::result_type(a, b);
  // True division of integers gives the default floating dtype, as torch.div.
  if (op == Arith::div && at::isIntegralType(type, /*includeBool=*/true)) {
    return at::typeMetaToScalarType(at::get_default_dtype());
  }
  return type;
}

// An in-place op's result must fit the tensor it is written into, as PyTorch requires
// (ints.add_(0.5) is an error, not a silent truncation).
void check_in_place(const char* op, at::ScalarType result, const at::Tensor& self) {
  TORCH_CHECK(c10::canCast(result, self.scalar_type()), op, ": result type ", result,
              " can't be cast to the desired output type ", self.scalar_type());
}

lt::Tensor arith_value(Arith op, const at::Tensor& a, const at::Tensor& b, at::ScalarType type,
                       double alpha, const char* name) {
  return finish(arith(op, operand(a, name), operand(b, name), compute_dtype(type), alpha), type);
}

template <Arith op>
at::Tensor binary(const at::Tensor& a, const at::Tensor& b) {
  return wrap(arith_value(op, a, b, arith_result(op, a, b), 1.0, "binary op"));
}

template <Arith op>
at::Tensor& binary_(at::Tensor& self, const at::Tensor& b) {
  const at::ScalarType type = arith_result(op, self, b);
  check_in_place("in-place binary op", type, self);
  write(self, arith_value(op, self, b, type, 1.0, "in-place binary op"));
  return self;
}

template <Arith op>
at::Tensor binary_alpha(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return wrap(arith_value(op, a, b, arith_result(op, a, b), alpha.toDouble(), "add/sub"));
}

template <Arith op>
at::Tensor& binary_alpha_(at::Tensor& self, const at::Tensor& b, const at::Scalar& alpha) {
  const at::ScalarType type = arith_result(op, self, b);
  check_in_place("add_/sub_", type, self);
  write(self, arith_value(op, self, b, type, alpha.toDouble(), "add_/sub_"));
  return self;
}

// A c10::Scalar as PyTorch's "wrapped number": the lowest rank in type promotion, so that
// x.add(0.5) keeps a rank-0 f32 x in f32.
at::Tensor number_tensor(const at::Scalar& s) {
  at::Tensor t = at::scalar_tensor(s, at::device(at::kCPU).dtype(s.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

template <Arith op>
at::Tensor binary_scalar(const at::Tensor& a, const at::Scalar& b) {
  return binary<op>(a, number_tensor(b));
}

template <Arith op>
at::Tensor& binary_scalar_(at::Tensor& self, const at::Scalar& b) {
  return binary_<op>(self, number_tensor(b));
}

template <Arith op>
at::Tensor binary_scalar_alpha(const at::Tensor& a, const at::Scalar& b, const at::Scalar& alpha) {
  return binary_alpha<op>(a, number_tensor(b), alpha);
}

template <Arith op>
at::Tensor& binary_scalar_alpha_(at::Tensor& self, const at::Scalar& b, const at::Scalar& alpha) {
  return binary_alpha_<op>(self, number_tensor(b), alpha);
}

// rsub(self, other, alpha) = other - alpha * self
at::Tensor rsub(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  return binary_alpha<Arith::sub>(other, self, alpha);
}

at::Tensor rsub_scalar(const at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return binary_alpha<Arith::sub>(number_tensor(other), self, alpha);
}

// self + value * t1 * t2 (addcmul) or self + value * t1 / t2 (addcdiv).
lt::Tensor addc(bool divide, const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                const at::Scalar& value, at::ScalarType type) {
  const lt::DType dtype = compute_dtype(type);
  const lt::Tensor s = in(operand(self, "addc"), dtype);
  const Operand a = operand(t1, "addc"), b = operand(t2, "addc");
  if (a.tensor.defined() && b.tensor.defined()) {
    const lt::Tensor x = in(a, dtype), y = in(b, dtype);
    return finish(divide ? s.addcdiv(x, y, value.toDouble()) : s.addcmul(x, y, value.toDouble()),
                  type);
  }
  const lt::Tensor term = arith(divide ? Arith::div : Arith::mul, a, b, dtype, 1.0);
  return finish(s.add(term, value.toDouble()), type);
}

at::Tensor addcmul(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                   const at::Scalar& value) {
  const at::ScalarType type = result_type({self, t1, t2});
  return wrap(addc(false, self, t1, t2, value, type));
}

at::Tensor& addcmul_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                     const at::Scalar& value) {
  check_in_place("addcmul_", result_type({self, t1, t2}), self);
  write(self, addc(false, self, t1, t2, value, self.scalar_type()));
  return self;
}

at::Tensor addcdiv(const at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                   const at::Scalar& value) {
  const at::ScalarType type = result_type({self, t1, t2});
  return wrap(addc(true, self, t1, t2, value, type));
}

at::Tensor& addcdiv_(at::Tensor& self, const at::Tensor& t1, const at::Tensor& t2,
                     const at::Scalar& value) {
  check_in_place("addcdiv_", result_type({self, t1, t2}), self);
  write(self, addc(true, self, t1, t2, value, self.scalar_type()));
  return self;
}

at::Tensor lerp_scalar(const at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  const at::ScalarType type = at::result_type(self, end);
  const lt::DType dtype = compute_dtype(type);
  return wrap(finish(
      in(operand(self, "lerp"), dtype).lerp(in(operand(end, "lerp"), dtype), weight.toDouble()),
      type));
}

at::Tensor& lerp_(at::Tensor& self, const at::Tensor& end, const at::Scalar& weight) {
  check_in_place("lerp_", at::result_type(self, end), self);
  write(self, read(lerp_scalar(self, end, weight)));
  return self;
}

// Unary math: integer inputs give the default floating dtype, as in PyTorch.
at::ScalarType floating_result(const at::Tensor& self) {
  return at::isFloatingType(self.scalar_type()) ? self.scalar_type()
                                                : at::typeMetaToScalarType(at::get_default_dtype());
}

template <lt::Tensor (lt::Tensor::*method)() const>
at::Tensor unary(const at::Tensor& self) {
  const at::ScalarType type = floating_result(self);
  return wrap(finish((in(operand(self, "unary op"), compute_dtype(type)).*method)(), type));
}

template <lt::Tensor (lt::Tensor::*method)() const>
at::Tensor& unary_(at::Tensor& self) {
  check_in_place("unary op", floating_result(self), self);
  write(self, (in(operand(self, "unary op"), compute_dtype(self.scalar_type())).*method)());
  return self;
}

at::Tensor pow_scalar(const at::Tensor& self, const at::Scalar& exponent) {
  const at::ScalarType type = at::result_type(self, exponent);
  return wrap(finish(in(operand(self, "pow"), compute_dtype(type)).pow(exponent.toDouble()), type));
}

at::Tensor& pow_scalar_(at::Tensor& self, const at::Scalar& exponent) {
  check_in_place("pow_", at::result_type(self, exponent), self);
  write(self, read(self).pow(exponent.toDouble()));
  return self;
}

at::Tensor clamp_scalars(const at::Tensor& self, const std::optional<at::Scalar>& min,
                         const std::optional<at::Scalar>& max) {
  const at::ScalarType type = self.scalar_type();
  lt::Tensor x = in(operand(self, "clamp"), compute_dtype(type));
  if (min && max) {
    x = x.clamp(min->toDouble(), max->toDouble());
  } else if (min) {
    x = x.clamp_min(min->toDouble());
  } else if (max) {
    x = x.clamp_max(max->toDouble());
  }
  return wrap(finish(x, type));
}

at::Tensor& clamp_(at::Tensor& self, const std::optional<at::Scalar>& min,
                   const std::optional<at::Scalar>& max) {
  write(self, read(clamp_scalars(self, min, max)));
  return self;
}

at::Tensor clamp_min(const at::Tensor& self, const at::Scalar& min) {
  return clamp_scalars(self, min, std::nullopt);
}

at::Tensor clamp_max(const at::Tensor& self, const at::Scalar& max) {
  return clamp_scalars(self, std::nullopt, max);
}

// torch.maximum and torch.minimum, with PyTorch's type promotion.
template <bool kMaximum>
at::Tensor extremum(const at::Tensor& a, const at::Tensor& b) {
  const char* name = kMaximum ? "maximum" : "minimum";
  const at::ScalarType type = at::result_type(a, b);
  const lt::DType dtype = compute_dtype(type);
  const lt::Tensor x = in(operand(a, name), dtype), y = in(operand(b, name), dtype);
  return wrap(finish(kMaximum ? lt::maximum(x, y) : lt::minimum(x, y), type));
}

enum class Compare { eq, ne, lt, le, gt, ge };

// The comparison with its operands swapped: a < b is b > a.
Compare swapped(Compare c) {
  switch (c) {
    case Compare::lt:
      return Compare::gt;
    case Compare::le:
      return Compare::ge;
    case Compare::gt:
      return Compare::lt;
    case Compare::ge:
      return Compare::le;
    default:
      return c;
  }
}

template <class Other>
lt::Tensor compare_with(Compare c, const lt::Tensor& a, const Other& b) {
  switch (c) {
    case Compare::eq:
      return a.eq(b);
    case Compare::ne:
      return a.ne(b);
    case Compare::lt:
      return a.lt(b);
    case Compare::le:
      return a.le(b);
    case Compare::gt:
      return a.gt(b);
    case Compare::ge:
      return a.ge(b);
  }
  TORCH_CHECK(false, "lazytensor: unknown comparison");
}

template <Compare c>
at::Tensor compare(const at::Tensor& a, const at::Tensor& b) {
  const Operand x = operand(a, "comparison"), y = operand(b, "comparison");
  if (x.number) return wrap(compare_with(swapped(c), y.tensor, *x.number));
  if (y.number) return wrap(compare_with(c, x.tensor, *y.number));
  return wrap(compare_with(c, x.tensor, y.tensor));
}

template <Compare c>
at::Tensor compare_scalar(const at::Tensor& a, const at::Scalar& b) {
  return compare<c>(a, number_tensor(b));
}

lt::Tensor as_tensor(const Operand& o, lt::DType dtype) {
  return o.number ? lt::full({}, *o.number, dtype) : in(o, dtype);
}

at::Tensor where(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  const at::ScalarType type = at::result_type(self, other);
  const lt::DType dtype = compute_dtype(type);
  const Operand cond = operand(condition, "where");
  return wrap(finish(
      lt::where(as_tensor(cond, lt::DType::boolean), as_tensor(operand(self, "where"), dtype),
                as_tensor(operand(other, "where"), dtype)),
      type));
}

at::Tensor isnan(const at::Tensor& self) {
  const lt::Tensor x = read(self);
  if (!lt::dtype_is_floating(x.dtype())) return wrap(lt::zeros(x.shape(), lt::DType::boolean));
  return wrap(x.ne(x));
}

// Logical ops over anything, as PyTorch: nonzero is true; the result is bool.
lt::Tensor truth(const at::Tensor& t, const char* op) {
  return as_tensor(operand(t, op), lt::DType::f64).ne(0.0);
}

at::Tensor logical_or(const at::Tensor& self, const at::Tensor& other) {
  const lt::Tensor a = truth(self, "logical_or").to(lt::DType::f64);
  const lt::Tensor b = truth(other, "logical_or").to(lt::DType::f64);
  return wrap((a + b).ne(0.0));
}

at::Tensor logical_and(const at::Tensor& self, const at::Tensor& other) {
  const lt::Tensor a = truth(self, "logical_and").to(lt::DType::f64);
  const lt::Tensor b = truth(other, "logical_and").to(lt::DType::f64);
  return wrap((a * b).ne(0.0));
}

at::Tensor logical_not(const at::Tensor& self) {
  return wrap(as_tensor(operand(self, "logical_not"), lt::DType::f64).eq(0.0));
}

at::Tensor sign(const at::Tensor& self) {
  const at::ScalarType type = self.scalar_type();
  return wrap(finish(in(operand(self, "sign"), compute_dtype(type)).sign(), type));
}

at::Tensor erf(const at::Tensor& self) {
  const at::ScalarType type = floating_result(self);
  return wrap(finish(lt::erf(in(operand(self, "erf"), compute_dtype(type))), type));
}

at::Tensor masked_fill_value(const at::Tensor& self, const at::Tensor& mask, const Operand& value) {
  const at::ScalarType type = self.scalar_type();
  const lt::DType dtype = compute_dtype(type);
  return wrap(finish(lt::where(as_tensor(operand(mask, "masked_fill"), lt::DType::boolean),
                               as_tensor(value, dtype), in(operand(self, "masked_fill"), dtype)),
                     type));
}

at::Tensor masked_fill_scalar(const at::Tensor& self, const at::Tensor& mask,
                              const at::Scalar& value) {
  return masked_fill_value(self, mask, Operand{lt::Tensor(), value.toDouble()});
}

at::Tensor& masked_fill_scalar_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  write(self, read(masked_fill_scalar(self, mask, value)));
  return self;
}

at::Tensor masked_fill_tensor(const at::Tensor& self, const at::Tensor& mask,
                              const at::Tensor& value) {
  return masked_fill_value(self, mask, operand(value, "masked_fill"));
}

at::Tensor& masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  write(self, read(masked_fill_tensor(self, mask, value)));
  return self;
}

at::Tensor& fill_scalar_(at::Tensor& self, const at::Scalar& value) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  write(self, lt::full(lt::Shape(sizes), value.toDouble(), to_engine(self.scalar_type(), "fill_")));
  return self;
}

at::Tensor& fill_tensor_(at::Tensor& self, const at::Tensor& value) {
  const Operand v = operand(value, "fill_");
  if (v.number) return fill_scalar_(self, *v.number);
  write(self, v.tensor);
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  return fill_scalar_(self, 0);
}

at::Tensor clone(const at::Tensor& self, std::optional<c10::MemoryFormat>) {
  return wrap(read(self));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", binary_alpha<Arith::add>);
  m.impl("add_.Tensor", binary_alpha_<Arith::add>);
  m.impl("add.Scalar", binary_scalar_alpha<Arith::add>);
  m.impl("add_.Scalar", binary_scalar_alpha_<Arith::add>);
  m.impl("sub.Tensor", binary_alpha<Arith::sub>);
  m.impl("sub_.Tensor", binary_alpha_<Arith::sub>);
  m.impl("sub.Scalar", binary_scalar_alpha<Arith::sub>);
  m.impl("sub_.Scalar", binary_scalar_alpha_<Arith::sub>);
  m.impl("rsub.Tensor", rsub);
  m.impl("rsub.Scalar", rsub_scalar);
  m.impl("mul.Tensor", binary<Arith::mul>);
  m.impl("mul_.Tensor", binary_<Arith::mul>);
  m.impl("mul.Scalar", binary_scalar<Arith::mul>);
  m.impl("mul_.Scalar", binary_scalar_<Arith::mul>);
  m.impl("div.Tensor", binary<Arith::div>);
  m.impl("div_.Tensor", binary_<Arith::div>);
  m.impl("div.Scalar", binary_scalar<Arith::div>);
  m.impl("div_.Scalar", binary_scalar_<Arith::div>);
  m.impl("addcmul", addcmul);
  m.impl("addcmul_", addcmul_);
  m.impl("addcdiv", addcdiv);
  m.impl("addcdiv_", addcdiv_);
  m.impl("lerp.Scalar", lerp_scalar);
  m.impl("lerp_.Scalar", lerp_);
  m.impl("pow.Tensor_Scalar", pow_scalar);
  m.impl("pow_.Scalar", pow_scalar_);
  m.impl("clamp", clamp_scalars);
  m.impl("clamp_", clamp_);
  m.impl("clamp_min", clamp_min);
  m.impl("clamp_max", clamp_max);
  m.impl("maximum", extremum<true>);
  m.impl("minimum", extremum<false>);
#define LT_UNARY_OP(name, Kind)            \
  m.impl(#name, unary<&lt::Tensor::name>); \
  m.impl(#name "_", unary_<&lt::Tensor::name>);
#include <lazytensor/elementwise_ops.def>
  m.impl("eq.Tensor", compare<Compare::eq>);
  m.impl("ne.Tensor", compare<Compare::ne>);
  m.impl("lt.Tensor", compare<Compare::lt>);
  m.impl("le.Tensor", compare<Compare::le>);
  m.impl("gt.Tensor", compare<Compare::gt>);
  m.impl("ge.Tensor", compare<Compare::ge>);
  m.impl("eq.Scalar", compare_scalar<Compare::eq>);
  m.impl("ne.Scalar", compare_scalar<Compare::ne>);
  m.impl("lt.Scalar", compare_scalar<Compare::lt>);
  m.impl("le.Scalar", compare_scalar<Compare::le>);
  m.impl("gt.Scalar", compare_scalar<Compare::gt>);
  m.impl("ge.Scalar", compare_scalar<Compare::ge>);
  m.impl("where.self", where);
  m.impl("isnan", isnan);
  m.impl("logical_or", logical_or);
  m.impl("logical_and", logical_and);
  m.impl("logical_not", logical_not);
  m.impl("sign", sign);
  m.impl("sgn", sign);
  m.impl("erf", erf);
  m.impl("masked_fill.Scalar", masked_fill_scalar);
  m.impl("masked_fill_.Scalar", masked_fill_scalar_);
  m.impl("masked_fill.Tensor", masked_fill_tensor);
  m.impl("masked_fill_.Tensor", masked_fill_tensor_);
  m.impl("fill_.Scalar", fill_scalar_);
  m.impl("fill_.Tensor", fill_tensor_);
  m.impl("zero_", zero_);
  m.impl("clone", clone);
}

}  // namespace lazytensor_torch
