// Op numerics. Every op in tensor.h is traced on fresh random inputs and checked three ways: its
// shape and dtype at trace time, the reference evaluator against values computed here in double
// from the inputs, and the launched kernels against the reference evaluator.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numbers>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"
#include "util/counter_uniform.h"

namespace {

using lt_test::elementwise;
using lt_test::expect_close;
using lt_test::Tol;

using lt::DType;
using lt::Shape;
using lt::Tensor;

constexpr Tol kF32{1e-5, 1e-6};
constexpr Tol kF64{1e-12, 1e-12};
// Reductions accumulate rounding over many elements.
constexpr Tol kF32Reduce{1e-4, 1e-4};
constexpr Tol kF64Reduce{1e-10, 1e-10};

Tol elementwise_tol(DType dtype) {
  return dtype == DType::f64 ? kF64 : kF32;
}
Tol reduce_tol(DType dtype) {
  return dtype == DType::f64 ? kF64Reduce : kF32Reduce;
}

// PyTorch's broadcasting: sizes align from the right, and a size of 1 stretches.
Shape broadcast_shape(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    const int ai = i - (rank - a.rank());
    const int bi = i - (rank - b.rank());
    const int64_t da = ai >= 0 ? a[ai] : 1;
    const int64_t db = bi >= 0 ? b[bi] : 1;
    dims[i] = da == 1 ? db : da;
  }
  return Shape(dims);
}

// The row-major values of a tensor of shape `from`, broadcast to `to`.
std::vector<double> expand(const std::vector<double>& values, const Shape& from, const Shape& to) {
  std::vector<double> out(static_cast<size_t>(to.numel()));
  const int offset = to.rank() - from.rank();
  for (int64_t i = 0; i < to.numel(); ++i) {
    int64_t rest = i;
    int64_t src = 0;
    int64_t stride = 1;
    for (int d = to.rank() - 1; d >= offset; --d) {
      const int64_t index = rest % to[d];
      rest /= to[d];
      const int64_t size = from[d - offset];
      if (size != 1) src += index * stride;
      stride *= size;
    }
    out[static_cast<size_t>(i)] = values[static_cast<size_t>(src)];
  }
  return out;
}

enum class Reduction { kSum, kMean, kMax, kNorm };

struct Reduced {
  Shape shape;
  std::vector<double> values;
};

// A reduction over `dims` computed here in double, independent of the engine.
Reduced reduce(const std::vector<double>& in, const Shape& shape, const std::vector<int>& dims,
               bool keepdim, Reduction kind) {
  std::vector<bool> reduced(shape.rank(), false);
  for (int d : dims) reduced[d < 0 ? d + shape.rank() : d] = true;
  std::vector<int64_t> out_dims;
  int64_t count = 1;
  for (int d = 0; d < shape.rank(); ++d) {
    if (!reduced[d]) {
      out_dims.push_back(shape[d]);
      continue;
    }
    count *= shape[d];
    if (keepdim) out_dims.push_back(1);
  }
  const Shape out(out_dims);
  const double init = kind == Reduction::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(static_cast<size_t>(out.numel()), init);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    int64_t rest = i;
    int64_t o = 0;
    int64_t stride = 1;
    for (int d = shape.rank() - 1; d >= 0; --d) {
      const int64_t index = rest % shape[d];
      rest /= shape[d];
      if (reduced[d]) continue;
      o += index * stride;
      stride *= shape[d];
    }
    const double x = in[static_cast<size_t>(i)];
    double& a = acc[static_cast<size_t>(o)];
    switch (kind) {
      case Reduction::kSum:
      case Reduction::kMean:
        a += x;
        break;
      case Reduction::kMax:
        a = std::max(a, x);
        break;
      case Reduction::kNorm:
        a += x * x;
        break;
    }
  }
  for (double& a : acc) {
    if (kind == Reduction::kMean) a /= static_cast<double>(count);
    if (kind == Reduction::kNorm) a = std::sqrt(a);
  }
  return {out, acc};
}

std::string dims_str(const std::vector<int>& dims) {
  std::string s = "{";
  for (size_t i = 0; i < dims.size(); ++i) s += (i == 0 ? "" : ", ") + std::to_string(dims[i]);
  return s + "}";
}

struct Input {
  Tensor tensor;
  std::vector<double> values;  // exactly what the tensor holds
};

// Random inputs for the op tests.
class RandomInputs : protected lt_test::Seeded {
 protected:
  // Uniform values in [lo, hi), rounded to `dtype` first so that expected values are computed
  // from exactly what the tensor holds.
  Input uniform(const Shape& shape, double lo, double hi, DType dtype = DType::f32) {
    std::vector<double> values(static_cast<size_t>(shape.numel()));
    for (double& v : values) {
      v = dtype == DType::f32 ? static_cast<float>(scalar(lo, hi)) : scalar(lo, hi);
    }
    if (dtype == DType::f32) {
      return {lt::from_vector(std::vector<float>(values.begin(), values.end()), shape), values};
    }
    return {lt::from_vector(values, shape), values};
  }
};

// Checks what `t` must know at trace time, then its reference value against `want` (computed
// here from the inputs), then the launched value against the reference.
void check(const Tensor& t, const Shape& shape, DType dtype, const std::vector<double>& want,
           Tol tol) {
  EXPECT_EQ(t.shape().str(), shape.str());
  EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype));
  // An empty result has nothing to compute and may be created as data directly.
  if (shape.numel() > 0) {
    EXPECT_TRUE(t.is_pending());
  }
  const std::vector<double> ref = lt::reference::evaluate(t);
  expect_close(ref, want, tol);
  lt::mark_step();
  expect_close(t.to_vector<double>(), ref, tol);
}

template <typename Case>
std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

// --- Ops of one tensor, some with a scalar operand. ---

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, double)> op;
  std::function<double(double, double)> want;
  double lo = -3;  // the input's range
  double hi = 3;
  double s_lo = -2;  // the scalar's range
  double s_hi = 2;
};
void PrintTo(const UnaryCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<UnaryCase> kUnaryCases = {
    {"neg", [](const auto& x, double) { return x.neg(); }, [](double x, double) { return -x; }},
    {"unary_minus", [](const auto& x, double) { return -x; }, [](double x, double) { return -x; }},
    {"abs", [](const auto& x, double) { return x.abs(); },
     [](double x, double) { return std::abs(x); }},
    {"sqrt", [](const auto& x, double) { return x.sqrt(); },
     [](double x, double) { return std::sqrt(x); }, 0.1, 4},
    {"rsqrt", [](const auto& x, double) { return x.rsqrt(); },
     [](double x, double) { return 1 / std::sqrt(x); }, 0.1, 4},
    {"exp", [](const auto& x, double) { return x.exp(); },
     [](double x, double) { return std::exp(x); }},
    {"log", [](const auto& x, double) { return x.log(); },
     [](double x, double) { return std::log(x); }, 0.1, 4},
    {"tanh", [](const auto& x, double) { return x.tanh(); },
     [](double x, double) { return std::tanh(x); }},
    {"sin", [](const auto& x, double) { return x.sin(); },
     [](double x, double) { return std::sin(x); }, -40, 40},
    {"cos", [](const auto& x, double) { return x.cos(); },
     [](double x, double) { return std::cos(x); }, -40, 40},
    {"sigmoid", [](const auto& x, double) { return x.sigmoid(); },
     [](double x, double) { return 1 / (1 + std::exp(-x)); }},
    {"relu", [](const auto& x, double) { return x.relu(); },
     [](double x, double) { return std::max(x, 0.0); }},
    {"clone", [](const auto& x, double) { return x.clone(); }, [](double x, double) { return x; }},
    // Both sides of the default threshold (20), and far enough below 0 that 1 + e^x rounds to 1.
    {"softplus", [](const auto& x, double) { return lt::softplus(x); },
     [](double x, double) { return x > 20 ? x : std::log1p(std::exp(x)); }, -40, 40},
    {"softplus_beta_threshold", [](const auto& x, double s) { return lt::softplus(x, s, 3.0); },
     [](double x, double s) { return x * s > 3 ? x : std::log1p(std::exp(x * s)) / s; }, -6, 6, 0.5,
     2},
    {"add_scalar", [](const auto& x, double s) { return x.add(s); },
     [](double x, double s) { return x + s; }},
    {"sub_scalar", [](const auto& x, double s) { return x.sub(s); },
     [](double x, double s) { return x - s; }},
    {"mul_scalar", [](const auto& x, double s) { return x.mul(s); },
     [](double x, double s) { return x * s; }},
    {"div_scalar", [](const auto& x, double s) { return x.div(s); },
     [](double x, double s) { return x / s; }, -3, 3, 0.5, 2},
    // A negative base with an integral exponent is defined, as in torch.pow.
    {"pow_integral", [](const auto& x, double) { return x.pow(3.0); },
     [](double x, double) { return x * x * x; }},
    // The square and the first power, as `x ** 2` and its gradient bring them.
    {"pow_square", [](const auto& x, double) { return x.pow(2.0); },
     [](double x, double) { return x * x; }},
    {"pow_one", [](const auto& x, double) { return x.pow(1.0); },
     [](double x, double) { return x; }},
    {"pow_fractional", [](const auto& x, double s) { return x.pow(s); },
     [](double x, double s) { return std::pow(x, s); }, 0.1, 4, 0.1, 2.5},
    {"clamp", [](const auto& x, double s) { return x.clamp(-s, s); },
     [](double x, double s) { return std::clamp(x, -s, s); }, -3, 3, 0.2, 2},
    {"clamp_min", [](const auto& x, double s) { return x.clamp_min(s); },
     [](double x, double s) { return std::max(x, s); }},
    {"clamp_max", [](const auto& x, double s) { return x.clamp_max(s); },
     [](double x, double s) { return std::min(x, s); }},
    {"tensor_plus_scalar", [](const auto& x, double s) { return x + s; },
     [](double x, double s) { return x + s; }},
    {"scalar_plus_tensor", [](const auto& x, double s) { return s + x; },
     [](double x, double s) { return s + x; }},
    {"tensor_minus_scalar", [](const auto& x, double s) { return x - s; },
     [](double x, double s) { return x - s; }},
    {"scalar_minus_tensor", [](const auto& x, double s) { return s - x; },
     [](double x, double s) { return s - x; }},
    {"tensor_times_scalar", [](const auto& x, double s) { return x * s; },
     [](double x, double s) { return x * s; }},
    {"scalar_times_tensor", [](const auto& x, double s) { return s * x; },
     [](double x, double s) { return s * x; }},
    {"tensor_over_scalar", [](const auto& x, double s) { return x / s; },
     [](double x, double s) { return x / s; }, -3, 3, 0.5, 2},
    {"scalar_over_tensor", [](const auto& x, double s) { return s / x; },
     [](double x, double s) { return s / x; }, 0.5, 2},
};

class UnaryOpTest : public testing::TestWithParam<UnaryCase>, protected RandomInputs {};

TEST_P(UnaryOpTest, MatchesFormulaAndReference) {
  const UnaryCase& c = GetParam();
  const Shape shape{7, 9};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Input x = uniform(shape, c.lo, c.hi, dtype);
    const double s = scalar(c.s_lo, c.s_hi);
    const std::vector<double> want = elementwise(x.values, [&](double v) { return c.want(v, s); });
    check(c.op(x.tensor, s), shape, dtype, want, elementwise_tol(dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryOpTest, testing::ValuesIn(kUnaryCases), case_name<UnaryCase>);

// --- Ops of two tensors, some with a scalar (alpha, weight) drawn from [-2, 2). ---

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&, double)> op;
  std::function<double(double, double, double)> want;
  double b_lo = -3;  // the second operand's range: positive for division
  double b_hi = 3;
};
void PrintTo(const BinaryCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<BinaryCase> kBinaryCases = {
    {"add", [](const auto& a, const auto& b, double) { return a.add(b); },
     [](double a, double b, double) { return a + b; }},
    {"add_alpha", [](const auto& a, const auto& b, double s) { return a.add(b, s); },
     [](double a, double b, double s) { return a + s * b; }},
    {"sub", [](const auto& a, const auto& b, double) { return a.sub(b); },
     [](double a, double b, double) { return a - b; }},
    {"sub_alpha", [](const auto& a, const auto& b, double s) { return a.sub(b, s); },
     [](double a, double b, double s) { return a - s * b; }},
    {"mul", [](const auto& a, const auto& b, double) { return a.mul(b); },
     [](double a, double b, double) { return a * b; }},
    {"div", [](const auto& a, const auto& b, double) { return a.div(b); },
     [](double a, double b, double) { return a / b; }, 0.5, 2},
    {"maximum", [](const auto& a, const auto& b, double) { return a.maximum(b); },
     [](double a, double b, double) { return std::max(a, b); }},
    {"minimum", [](const auto& a, const auto& b, double) { return a.minimum(b); },
     [](double a, double b, double) { return std::min(a, b); }},
    {"lerp_scalar_weight", [](const auto& a, const auto& b, double s) { return a.lerp(b, s); },
     [](double a, double b, double s) { return a + s * (b - a); }},
    {"free_add", [](const auto& a, const auto& b, double s) { return lt::add(a, b, s); },
     [](double a, double b, double s) { return a + s * b; }},
    {"free_add_default_alpha", [](const auto& a, const auto& b, double) { return lt::add(a, b); },
     [](double a, double b, double) { return a + b; }},
    {"free_sub", [](const auto& a, const auto& b, double s) { return lt::sub(a, b, s); },
     [](double a, double b, double s) { return a - s * b; }},
    {"free_mul", [](const auto& a, const auto& b, double) { return lt::mul(a, b); },
     [](double a, double b, double) { return a * b; }},
    {"free_div", [](const auto& a, const auto& b, double) { return lt::div(a, b); },
     [](double a, double b, double) { return a / b; }, 0.5, 2},
    {"free_maximum", [](const auto& a, const auto& b, double) { return lt::maximum(a, b); },
     [](double a, double b, double) { return std::max(a, b); }},
    {"free_minimum", [](const auto& a, const auto& b, double) { return lt::minimum(a, b); },
     [](double a, double b, double) { return std::min(a, b); }},
    {"operator_plus", [](const auto& a, const auto& b, double) { return a + b; },
     [](double a, double b, double) { return a + b; }},
    {"operator_minus", [](const auto& a, const auto& b, double) { return a - b; },
     [](double a, double b, double) { return a - b; }},
    {"operator_times", [](const auto& a, const auto& b, double) { return a * b; },
     [](double a, double b, double) { return a * b; }},
    {"operator_over", [](const auto& a, const auto& b, double) { return a / b; },
     [](double a, double b, double) { return a / b; }, 0.5, 2},
};

struct ShapePair {
  Shape a;
  Shape b;
};
const std::vector<ShapePair> kBroadcastShapes = {
    {{3, 4}, {3, 4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {4}}, {{}, {2, 3}},
    {{2, 3}, {}},     {{0, 3}, {1, 3}}, {{5, 1}, {1, 1}},
};

class BinaryOpTest : public testing::TestWithParam<BinaryCase>, protected RandomInputs {};

TEST_P(BinaryOpTest, BroadcastsAndMatchesFormulaAndReference) {
  const BinaryCase& c = GetParam();
  for (const ShapePair& shapes : kBroadcastShapes) {
    SCOPED_TRACE(shapes.a.str() + " with " + shapes.b.str());
    const Input a = uniform(shapes.a, -3, 3);
    const Input b = uniform(shapes.b, c.b_lo, c.b_hi);
    const double s = scalar(-2, 2);
    const Shape out = broadcast_shape(shapes.a, shapes.b);
    const std::vector<double> av = expand(a.values, shapes.a, out);
    const std::vector<double> bv = expand(b.values, shapes.b, out);
    std::vector<double> want(av.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = c.want(av[i], bv[i], s);
    check(c.op(a.tensor, b.tensor, s), out, DType::f32, want, kF32);
  }
}

TEST_P(BinaryOpTest, PromotesMixedFloatTypes) {
  const BinaryCase& c = GetParam();
  const Shape sa{3, 1};
  const Shape sb{1, 4};
  const Shape out{3, 4};
  for (const auto& [da, db] : {std::pair{DType::f32, DType::f64}, std::pair{DType::f64, DType::f32},
                               std::pair{DType::f64, DType::f64}}) {
    SCOPED_TRACE(std::string(lt::dtype_name(da)) + " with " + lt::dtype_name(db));
    EXPECT_EQ(lt::promote_types(da, db), DType::f64);
    const Input a = uniform(sa, -3, 3, da);
    const Input b = uniform(sb, c.b_lo, c.b_hi, db);
    const double s = scalar(-2, 2);
    const std::vector<double> av = expand(a.values, sa, out);
    const std::vector<double> bv = expand(b.values, sb, out);
    std::vector<double> want(av.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = c.want(av[i], bv[i], s);
    // An f32 operand widens exactly, so the result is as precise as an all-f64 one.
    check(c.op(a.tensor, b.tensor, s), out, DType::f64, want, kF64);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryOpTest, testing::ValuesIn(kBinaryCases), case_name<BinaryCase>);

// --- Ops of three tensors and a scalar value. The third operand lies in [0.25, 1): a safe
// divisor for addcdiv and a weight for lerp. ---

struct TernaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, double)> op;
  std::function<double(double, double, double, double)> want;
};
void PrintTo(const TernaryCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<TernaryCase> kTernaryCases = {
    {"addcmul",
     [](const auto& a, const auto& b, const auto& c, double s) { return a.addcmul(b, c, s); },
     [](double a, double b, double c, double s) { return a + s * b * c; }},
    {"addcmul_default_value",
     [](const auto& a, const auto& b, const auto& c, double) { return a.addcmul(b, c); },
     [](double a, double b, double c, double) { return a + b * c; }},
    {"addcdiv",
     [](const auto& a, const auto& b, const auto& c, double s) { return a.addcdiv(b, c, s); },
     [](double a, double b, double c, double s) { return a + s * b / c; }},
    {"addcdiv_default_value",
     [](const auto& a, const auto& b, const auto& c, double) { return a.addcdiv(b, c); },
     [](double a, double b, double c, double) { return a + b / c; }},
    {"lerp_tensor_weight",
     [](const auto& a, const auto& b, const auto& c, double) { return a.lerp(b, c); },
     [](double a, double b, double c, double) { return a + c * (b - a); }},
};

struct ShapeTriple {
  Shape a;
  Shape b;
  Shape c;
};
const std::vector<ShapeTriple> kTernaryShapes = {
    {{3, 4}, {3, 4}, {3, 4}},
    {{3, 4}, {1, 4}, {3, 1}},
    {{2, 3, 4}, {4}, {}},
    {{1, 4}, {3, 1}, {1, 1}},  // the result is larger than every operand
};

class TernaryOpTest : public testing::TestWithParam<TernaryCase>, protected RandomInputs {};

TEST_P(TernaryOpTest, BroadcastsAndMatchesFormulaAndReference) {
  const TernaryCase& c = GetParam();
  for (const ShapeTriple& shapes : kTernaryShapes) {
    SCOPED_TRACE(shapes.a.str() + ", " + shapes.b.str() + ", " + shapes.c.str());
    const Input a = uniform(shapes.a, -3, 3);
    const Input b = uniform(shapes.b, -3, 3);
    const Input w = uniform(shapes.c, 0.25, 1);
    const double s = scalar(-2, 2);
    const Shape out = broadcast_shape(broadcast_shape(shapes.a, shapes.b), shapes.c);
    const std::vector<double> av = expand(a.values, shapes.a, out);
    const std::vector<double> bv = expand(b.values, shapes.b, out);
    const std::vector<double> wv = expand(w.values, shapes.c, out);
    std::vector<double> want(av.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = c.want(av[i], bv[i], wv[i], s);
    check(c.op(a.tensor, b.tensor, w.tensor, s), out, DType::f32, want, kF32);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, TernaryOpTest, testing::ValuesIn(kTernaryCases),
                         case_name<TernaryCase>);

// --- In-place ops. Each runs on `a` ([3, 4]) with b ([4], in [0.5, 2)), w ([3, 1], in
// [0.25, 1)) and a scalar in [0.5, 1.5), and must equal its out-of-place expression. ---

struct InPlaceCase {
  std::string name;
  std::function<Tensor&(Tensor&, const Tensor&, const Tensor&, double)> in_place;
  std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, double)> out_of_place;
  double a_lo = -3;
  double a_hi = 3;
};
void PrintTo(const InPlaceCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<InPlaceCase> kInPlaceCases = {
    {"add_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.add_(b); },
     [](auto& a, auto& b, auto&, double) { return a.add(b); }},
    {"add_alpha_", [](auto& a, auto& b, auto&, double s) -> Tensor& { return a.add_(b, s); },
     [](auto& a, auto& b, auto&, double s) { return a.add(b, s); }},
    {"add_scalar_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.add_(s); },
     [](auto& a, auto&, auto&, double s) { return a.add(s); }},
    {"sub_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.sub_(b); },
     [](auto& a, auto& b, auto&, double) { return a.sub(b); }},
    {"sub_alpha_", [](auto& a, auto& b, auto&, double s) -> Tensor& { return a.sub_(b, s); },
     [](auto& a, auto& b, auto&, double s) { return a.sub(b, s); }},
    {"sub_scalar_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.sub_(s); },
     [](auto& a, auto&, auto&, double s) { return a.sub(s); }},
    {"mul_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.mul_(b); },
     [](auto& a, auto& b, auto&, double) { return a.mul(b); }},
    {"mul_scalar_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.mul_(s); },
     [](auto& a, auto&, auto&, double s) { return a.mul(s); }},
    {"div_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.div_(b); },
     [](auto& a, auto& b, auto&, double) { return a.div(b); }},
    {"div_scalar_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.div_(s); },
     [](auto& a, auto&, auto&, double s) { return a.div(s); }},
    {"pow_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.pow_(s); },
     [](auto& a, auto&, auto&, double s) { return a.pow(s); }, 0.5, 2},
    {"clamp_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.clamp_(-s, s); },
     [](auto& a, auto&, auto&, double s) { return a.clamp(-s, s); }},
    {"clamp_min_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.clamp_min_(-s); },
     [](auto& a, auto&, auto&, double s) { return a.clamp_min(-s); }},
    {"clamp_max_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.clamp_max_(s); },
     [](auto& a, auto&, auto&, double s) { return a.clamp_max(s); }},
    {"lerp_scalar_weight_",
     [](auto& a, auto& b, auto&, double s) -> Tensor& { return a.lerp_(b, s); },
     [](auto& a, auto& b, auto&, double s) { return a.lerp(b, s); }},
    {"lerp_tensor_weight_",
     [](auto& a, auto& b, auto& w, double) -> Tensor& { return a.lerp_(b, w); },
     [](auto& a, auto& b, auto& w, double) { return a.lerp(b, w); }},
    {"addcmul_", [](auto& a, auto& b, auto& w, double s) -> Tensor& { return a.addcmul_(b, w, s); },
     [](auto& a, auto& b, auto& w, double s) { return a.addcmul(b, w, s); }},
    {"addcmul_default_value_",
     [](auto& a, auto& b, auto& w, double) -> Tensor& { return a.addcmul_(b, w); },
     [](auto& a, auto& b, auto& w, double) { return a.addcmul(b, w); }},
    {"addcdiv_", [](auto& a, auto& b, auto& w, double s) -> Tensor& { return a.addcdiv_(b, w, s); },
     [](auto& a, auto& b, auto& w, double s) { return a.addcdiv(b, w, s); }},
    {"addcdiv_default_value_",
     [](auto& a, auto& b, auto& w, double) -> Tensor& { return a.addcdiv_(b, w); },
     [](auto& a, auto& b, auto& w, double) { return a.addcdiv(b, w); }},
    {"neg_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.neg_(); },
     [](auto& a, auto&, auto&, double) { return a.neg(); }},
    {"abs_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.abs_(); },
     [](auto& a, auto&, auto&, double) { return a.abs(); }},
    {"sqrt_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.sqrt_(); },
     [](auto& a, auto&, auto&, double) { return a.sqrt(); }, 0.1, 4},
    {"rsqrt_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.rsqrt_(); },
     [](auto& a, auto&, auto&, double) { return a.rsqrt(); }, 0.1, 4},
    {"exp_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.exp_(); },
     [](auto& a, auto&, auto&, double) { return a.exp(); }},
    {"log_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.log_(); },
     [](auto& a, auto&, auto&, double) { return a.log(); }, 0.1, 4},
    {"tanh_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.tanh_(); },
     [](auto& a, auto&, auto&, double) { return a.tanh(); }},
    {"sigmoid_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.sigmoid_(); },
     [](auto& a, auto&, auto&, double) { return a.sigmoid(); }},
    {"relu_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.relu_(); },
     [](auto& a, auto&, auto&, double) { return a.relu(); }},
    {"maximum_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.maximum_(b); },
     [](auto& a, auto& b, auto&, double) { return a.maximum(b); }},
    {"minimum_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.minimum_(b); },
     [](auto& a, auto& b, auto&, double) { return a.minimum(b); }},
    {"copy_", [](auto& a, auto& b, auto&, double) -> Tensor& { return a.copy_(b); },
     [](auto& a, auto& b, auto&, double) { return lt::zeros(a.shape(), a.dtype()) + b; }},
    {"zero_", [](auto& a, auto&, auto&, double) -> Tensor& { return a.zero_(); },
     [](auto& a, auto&, auto&, double) { return lt::zeros(a.shape(), a.dtype()); }},
    {"fill_", [](auto& a, auto&, auto&, double s) -> Tensor& { return a.fill_(s); },
     [](auto& a, auto&, auto&, double s) { return lt::full(a.shape(), s, a.dtype()); }},
};

class InPlaceOpTest : public testing::TestWithParam<InPlaceCase>, protected RandomInputs {};

TEST_P(InPlaceOpTest, RebindsToTheOutOfPlaceResult) {
  const InPlaceCase& c = GetParam();
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Tol tol = elementwise_tol(dtype);
    Tensor a = uniform({3, 4}, c.a_lo, c.a_hi, dtype).tensor;
    const Tensor b = uniform({4}, 0.5, 2, dtype).tensor;
    const Tensor w = uniform({3, 1}, 0.25, 1, dtype).tensor;
    const double s = scalar(0.5, 1.5);
    // Still pending when `a` is updated: the update must not clobber the old value it reads.
    const Tensor expected = c.out_of_place(a, b, w, s);
    const std::vector<double> want = lt::reference::evaluate(expected);

    Tensor& result = c.in_place(a, b, w, s);
    EXPECT_EQ(&result, &a);
    EXPECT_EQ(a.shape().str(), "[3, 4]");
    EXPECT_STREQ(lt::dtype_name(a.dtype()), lt::dtype_name(dtype));
    EXPECT_TRUE(a.is_pending());
    expect_close(lt::reference::evaluate(a), want, tol);
    lt::mark_step();
    expect_close(a.to_vector<double>(), want, tol);
    expect_close(expected.to_vector<double>(), want, tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, InPlaceOpTest, testing::ValuesIn(kInPlaceCases),
                         case_name<InPlaceCase>);

// --- Reductions. ---

struct ReductionCase {
  std::string name;
  Reduction kind;
  std::function<Tensor(const Tensor&)> all;
  std::function<Tensor(const Tensor&, const std::vector<int>&, bool)> over;
};
void PrintTo(const ReductionCase& c, std::ostream* os) {
  *os << c.name;
}

const std::vector<ReductionCase> kReductionCases = {
    {"sum", Reduction::kSum, [](const auto& t) { return t.sum(); },
     [](const auto& t, const auto& dims, bool keepdim) { return t.sum(dims, keepdim); }},
    {"mean", Reduction::kMean, [](const auto& t) { return t.mean(); },
     [](const auto& t, const auto& dims, bool keepdim) { return t.mean(dims, keepdim); }},
    {"max", Reduction::kMax, [](const auto& t) { return t.max(); },
     [](const auto& t, const auto& dims, bool keepdim) { return t.max(dims, keepdim); }},
    {"norm", Reduction::kNorm, [](const auto& t) { return t.norm(); },
     [](const auto& t, const auto& dims, bool keepdim) { return t.norm(dims, keepdim); }},
};

class ReductionTest : public testing::TestWithParam<ReductionCase>, protected RandomInputs {};

TEST_P(ReductionTest, OverAllElements) {
  const ReductionCase& c = GetParam();
  const Shape shape{4, 33};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Input x = uniform(shape, -3, 3, dtype);
    const Reduced want = reduce(x.values, shape, {0, 1}, false, c.kind);
    const Tensor t = c.all(x.tensor);
    check(t, Shape{}, dtype, want.values, reduce_tol(dtype));
    expect_close({t.item()}, want.values, reduce_tol(dtype));
  }
}

TEST_P(ReductionTest, OverDims) {
  const ReductionCase& c = GetParam();
  const Shape shape{3, 4, 5};
  const std::vector<std::vector<int>> dim_sets = {{0},    {1},      {2},    {-1},
                                                  {0, 2}, {-3, -1}, {2, 0}, {0, 1, 2}};
  for (DType dtype : {DType::f32, DType::f64}) {
    const Input x = uniform(shape, -3, 3, dtype);
    for (const std::vector<int>& dims : dim_sets) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(std::string(lt::dtype_name(dtype)) + " dims " + dims_str(dims) +
                     (keepdim ? " keepdim" : ""));
        const Reduced want = reduce(x.values, shape, dims, keepdim, c.kind);
        check(c.over(x.tensor, dims, keepdim), want.shape, dtype, want.values, reduce_tol(dtype));
      }
    }
  }
}

// Reductions over leading dims (a bias's gradient over the batch) fold rows of neighbouring
// columns: rows of 700 and 2100 columns (more than a kernel call of 1024 each), an input read
// through a transposed view, a broadcast one, and a NaN in one column (which must stay in it).
TEST_P(ReductionTest, OverLeadingDimsOfWideRows) {
  const ReductionCase& c = GetParam();
  const Shape shape{7, 3, 700};
  for (DType dtype : {DType::f32, DType::f64}) {
    const Input x = uniform(shape, -3, 3, dtype);
    for (const std::vector<int>& dims : std::vector<std::vector<int>>{{0}, {0, 1}}) {
      SCOPED_TRACE(std::string(lt::dtype_name(dtype)) + " dims " + dims_str(dims));
      const Reduced want = reduce(x.values, shape, dims, false, c.kind);
      check(c.over(x.tensor, dims, false), want.shape, dtype, want.values, reduce_tol(dtype));
    }
    // [2100, 7] stored transposed: its columns are the view's rows.
    const Shape flat{7, 2100};
    const Tensor transposed = x.tensor.reshape({7, 2100}).t().contiguous().t();
    const Reduced columns = reduce(x.values, flat, {0}, false, c.kind);
    check(c.over(transposed, {0}, false), columns.shape, dtype, columns.values, reduce_tol(dtype));
    // A row broadcast down the columns, added before the fold.
    const Input row = uniform(Shape{2100}, -1, 1, dtype);
    std::vector<double> sums(x.values.size());
    for (size_t i = 0; i < sums.size(); ++i) sums[i] = x.values[i] + row.values[i % 2100];
    const Reduced broadcast = reduce(sums, flat, {0}, false, c.kind);
    check(c.over(x.tensor.reshape({7, 2100}) + row.tensor, {0}, false), broadcast.shape, dtype,
          broadcast.values, reduce_tol(dtype));
    // A NaN stays in its own column.
    std::vector<double> with_nan = x.values;
    with_nan[2 * 2100 + 823] = std::numeric_limits<double>::quiet_NaN();
    const std::vector<double> folded =
        c.over(lt::from_vector(with_nan, shape).to(dtype), {0}, false).to_vector<double>();
    EXPECT_TRUE(std::isnan(folded[823]));
    EXPECT_FALSE(std::isnan(folded[822]) || std::isnan(folded[824]));
  }
}

// Tall column reductions split their rows into chunks, each with partial sums combined in order;
// wide ones split their columns into blocks of several kernel calls a row.
TEST_P(ReductionTest, OverManyRowsInChunks) {
  const ReductionCase& c = GetParam();
  for (const Shape& shape : {Shape{3000, 130}, Shape{2, 1500, 1100}, Shape{300, 5000}}) {
    const std::vector<int> dims = shape.rank() == 2 ? std::vector<int>{0} : std::vector<int>{0, 1};
    for (DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(shape.str() + " " + lt::dtype_name(dtype));
      const Input x = uniform(shape, -3, 3, dtype);
      const Reduced want = reduce(x.values, shape, dims, false, c.kind);
      check(c.over(x.tensor, dims, false), want.shape, dtype, want.values, reduce_tol(dtype));
      // The largest value and a NaN in the last rows, another NaN a third of the way down:
      // chunks other than the first decide.
      const int64_t cols = shape[shape.rank() - 1];
      const int64_t rows = shape.numel() / cols;
      std::vector<double> late = x.values;
      late[late.size() - cols + 5] = 100;
      late[late.size() - 2 * cols + 7] = std::numeric_limits<double>::quiet_NaN();
      late[rows / 3 * cols + 9] = std::numeric_limits<double>::quiet_NaN();
      const Reduced late_want = reduce(late, shape, dims, false, c.kind);
      const Tensor late_tensor = lt::from_vector(late, shape).to(dtype);
      const std::vector<double> got = c.over(late_tensor, dims, false).to_vector<double>();
      ASSERT_EQ(got.size(), late_want.values.size());
      EXPECT_TRUE(std::isnan(got[7]));
      EXPECT_TRUE(std::isnan(got[9]));
      EXPECT_NEAR(got[5], late_want.values[5], 1e-3 * std::max(1.0, std::abs(late_want.values[5])));
      EXPECT_FALSE(std::isnan(got[6]) || std::isnan(got[8]) || std::isnan(got[10]));
    }
  }
}

// The reduced values come from pending elementwise ops, which a compiler may fuse in.
TEST_P(ReductionTest, OfAPendingExpression) {
  const ReductionCase& c = GetParam();
  const Shape shape{6, 10};
  const Input a = uniform(shape, -2, 2);
  const Input b = uniform(shape, -2, 2);
  const Tensor e = a.tensor * b.tensor - 1.0;
  std::vector<double> ev(a.values.size());
  for (size_t i = 0; i < ev.size(); ++i) ev[i] = a.values[i] * b.values[i] - 1.0;
  const Reduced rows = reduce(ev, shape, {1}, false, c.kind);
  check(c.over(e, {1}, false), rows.shape, DType::f32, rows.values, kF32Reduce);
  const Reduced all = reduce(ev, shape, {0, 1}, false, c.kind);
  check(c.all(e), Shape{}, DType::f32, all.values, kF32Reduce);
}

INSTANTIATE_TEST_SUITE_P(Ops, ReductionTest, testing::ValuesIn(kReductionCases),
                         case_name<ReductionCase>);

// --- Everything else. ---

class OpsTest : public testing::Test, protected RandomInputs {};

TEST_F(OpsTest, SumOverAnEmptyDimIsZero) {
  const Input x = uniform({0, 3}, -1, 1);
  check(x.tensor.sum({0}), Shape{3}, DType::f32, {0, 0, 0}, kF32);
  check(x.tensor.sum({1}, true), Shape{0, 1}, DType::f32, {}, kF32);
  const Tensor total = x.tensor.sum();
  check(total, Shape{}, DType::f32, {0}, kF32);
  EXPECT_EQ(total.item(), 0.0);
}

TEST_F(OpsTest, ItemReadsARankZeroTensor) {
  const Tensor x = lt::from_vector(std::vector<float>{2.5f}, Shape{});
  EXPECT_EQ(x.dim(), 0);
  EXPECT_EQ(x.item(), 2.5);
  EXPECT_EQ((x * 2.0).item(), 5.0);
}

TEST_F(OpsTest, ChainedInPlaceMatchesADoubleLoop) {
  Input m = uniform({64}, -1, 1);
  const Input g = uniform({64}, -1, 1);
  std::vector<double> want = m.values;
  const auto update = [&] {
    m.tensor.mul_(0.9).add_(g.tensor, 0.1);
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] * 0.9 + 0.1 * g.values[i];
  };
  update();
  update();  // two updates traced into one step
  lt::mark_step();
  update();
  lt::mark_step();
  update();  // read while still pending
  expect_close(m.tensor.to_vector<double>(), want, kF32);
}

TEST_F(OpsTest, ShapeAndDtypeAreKnownAtTraceTime) {
  const Input a = uniform({3, 1}, -1, 1);
  const Input b = uniform({1, 4}, -1, 1, DType::f64);
  // Lets the counter settle: an earlier test's step may still be running.
  lt::wait_device_ops();
  const int64_t executed = lt::metrics::counter_value("ExecuteComputation");
  const Tensor sum = a.tensor + b.tensor;
  const Tensor rows = sum.mean({-1}, true);
  const Tensor total = rows.norm();
  EXPECT_EQ(sum.shape().str(), "[3, 4]");
  EXPECT_STREQ(lt::dtype_name(sum.dtype()), lt::dtype_name(DType::f64));
  EXPECT_EQ(rows.shape().str(), "[3, 1]");
  EXPECT_EQ(total.dim(), 0);
  EXPECT_EQ(total.numel(), 1);
  EXPECT_TRUE(sum.is_pending());
  EXPECT_TRUE(rows.is_pending());
  EXPECT_TRUE(total.is_pending());
  // Neither tracing nor the reference evaluator launches anything.
  const std::vector<double> ref = lt::reference::evaluate(total);
  EXPECT_EQ(lt::metrics::counter_value("ExecuteComputation"), executed);
  EXPECT_TRUE(total.is_pending());
  lt::mark_step();
  EXPECT_FALSE(sum.is_pending());
  EXPECT_FALSE(total.is_pending());
  expect_close({total.item()}, ref, kF64Reduce);
}

TEST_F(OpsTest, ScalarsDoNotPromote) {
  const Input a = uniform({5}, -2, 2);
  const double s = scalar(-2, 2);
  check(a.tensor * s, Shape{5}, DType::f32, elementwise(a.values, [&](double v) { return v * s; }),
        kF32);
  const Input b = uniform({5}, -2, 2, DType::f64);
  check(b.tensor + s, Shape{5}, DType::f64, elementwise(b.values, [&](double v) { return v + s; }),
        kF64);
}

// A difference below f32's resolution survives only if f64 tensors really compute in double.
TEST_F(OpsTest, F64KeepsDoublePrecision) {
  const Tensor x = lt::from_vector(std::vector<double>{1 + 1e-12, 1 - 1e-12}, {2});
  check((x - 1.0) * 1e12, Shape{2}, DType::f64, {1, -1}, Tol{1e-3, 0});
}

TEST_F(OpsTest, ConvertsBetweenDtypes) {
  const Input a = uniform({4, 5}, -3, 3);
  check(a.tensor.to(DType::f64), Shape{4, 5}, DType::f64, a.values, Tol{0, 0});

  const Input b = uniform({4, 5}, -3, 3, DType::f64);
  const Tensor narrowed = b.tensor.to(DType::f32);
  const std::vector<double> rounded =
      elementwise(b.values, [](double v) { return static_cast<float>(v); });
  check(narrowed, Shape{4, 5}, DType::f32, rounded, Tol{0, 0});
  EXPECT_EQ(narrowed.to_vector<float>(), std::vector<float>(rounded.begin(), rounded.end()));
}

TEST_F(OpsTest, InPlaceCastsToItsOwnDtype) {
  const Input wide = uniform({6}, -2, 2, DType::f64);
  const Input narrow = uniform({6}, -2, 2);

  Input a = uniform({6}, -2, 2);
  std::vector<double> want(a.values.size());
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = static_cast<float>(a.values[i] + wide.values[i]);
  }
  a.tensor.add_(wide.tensor);
  EXPECT_STREQ(lt::dtype_name(a.tensor.dtype()), lt::dtype_name(DType::f32));
  lt::mark_step();
  expect_close(a.tensor.to_vector<double>(), want, kF32);

  Input b = uniform({6}, -2, 2, DType::f64);
  for (size_t i = 0; i < want.size(); ++i) want[i] = b.values[i] * narrow.values[i];
  b.tensor.mul_(narrow.tensor);
  EXPECT_STREQ(lt::dtype_name(b.tensor.dtype()), lt::dtype_name(DType::f64));
  lt::mark_step();
  expect_close(b.tensor.to_vector<double>(), want, kF64);

  Tensor c = lt::zeros({6});
  c.copy_(wide.tensor);
  EXPECT_STREQ(lt::dtype_name(c.dtype()), lt::dtype_name(DType::f32));
  const std::vector<double> rounded =
      elementwise(wide.values, [](double v) { return static_cast<float>(v); });
  EXPECT_EQ(c.to_vector<double>(), rounded);
}

// An elementwise chain mixing reductions broadcast back over their input (as layer norm does).
TEST_F(OpsTest, FusedChainWithBroadcastReductions) {
  const Shape shape{8, 16};
  const Input x = uniform(shape, -2, 2);
  const Input y = uniform(shape, 0.5, 2);
  const Tensor t =
      ((x.tensor - x.tensor.mean({1}, true)) / x.tensor.norm({-1}, true)).tanh() + y.tensor.sqrt();
  const Reduced mean = reduce(x.values, shape, {1}, true, Reduction::kMean);
  const Reduced norm = reduce(x.values, shape, {1}, true, Reduction::kNorm);
  std::vector<double> want(x.values.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t row = i / 16;
    want[i] =
        std::tanh((x.values[i] - mean.values[row]) / norm.values[row]) + std::sqrt(y.values[i]);
  }
  check(t, shape, DType::f32, want, kF32Reduce);
}

// Large enough to span many tiles and threads, with a length that is no power of two.
TEST_F(OpsTest, LargeTensors) {
  const Shape shape{100003};
  const Input a = uniform(shape, 0, 1);
  const Input b = uniform(shape, 0, 1);
  std::vector<double> want(a.values.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = a.values[i] * b.values[i] + a.values[i];
  check(a.tensor * b.tensor + a.tensor, shape, DType::f32, want, kF32);

  const Reduced sum = reduce(a.values, shape, {0}, false, Reduction::kSum);
  check(a.tensor.sum(), Shape{}, DType::f32, sum.values, Tol{1e-3, 0});
  const Reduced max = reduce(a.values, shape, {0}, false, Reduction::kMax);
  check(a.tensor.max(), Shape{}, DType::f32, max.values, Tol{0, 0});
}

TEST_F(OpsTest, Factories) {
  EXPECT_EQ(lt::zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0.0f));
  const Tensor ones = lt::ones({4}, DType::f64);
  EXPECT_STREQ(lt::dtype_name(ones.dtype()), lt::dtype_name(DType::f64));
  EXPECT_EQ(ones.to_vector<double>(), std::vector<double>(4, 1.0));
  EXPECT_EQ(lt::full({2, 2}, 2.5).to_vector<float>(), std::vector<float>(4, 2.5f));

  const uint64_t seed = next_seed();
  const Shape shape{10000};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Tensor u = lt::rand(shape, seed, dtype);
    EXPECT_STREQ(lt::dtype_name(u.dtype()), lt::dtype_name(dtype));
    const std::vector<double> uv = u.to_vector<double>();
    EXPECT_EQ(uv, lt::rand(shape, seed, dtype).to_vector<double>());
    EXPECT_NE(uv, lt::rand(shape, seed + 1, dtype).to_vector<double>());
    EXPECT_TRUE(std::all_of(uv.begin(), uv.end(), [](double v) { return v >= 0 && v < 1; }));

    const std::vector<double> nv = lt::randn(shape, seed, dtype).to_vector<double>();
    EXPECT_EQ(nv, lt::randn(shape, seed, dtype).to_vector<double>());
    const double mean = reduce(nv, shape, {0}, false, Reduction::kMean).values[0];
    const double rms = reduce(nv, shape, {0}, false, Reduction::kNorm).values[0] / 100;
    // Ten standard errors: a wrong distribution fails, a right one essentially never does.
    EXPECT_NEAR(mean, 0, 0.1);
    EXPECT_NEAR(rms, 1, 0.1);
  }
}

// Large draws are filled a slice per thread: each value must still be the one its index and the
// seed give (here computed on the host, element by element), whichever slice wrote it.
TEST_F(OpsTest, LargeRandomDrawsAreTheSameValuesElementByElement) {
  const uint64_t seed = next_seed();
  const int64_t n = (int64_t{1} << 19) + 3;  // several slices, the last one short
  const std::vector<double> uniform = lt::rand({n}, seed, DType::f64).to_vector<double>();
  const std::vector<double> normal = lt::randn({n}, seed, DType::f64).to_vector<double>();
  ASSERT_EQ(uniform.size(), static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(uniform[i], lt::detail::counter_uniform(seed, i)) << i;
    const double u1 = 1.0 - lt::detail::counter_uniform(seed, 2 * i),
                 u2 = lt::detail::counter_uniform(seed, 2 * i + 1);
    ASSERT_EQ(normal[i], std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2)) << i;
  }
}

}  // namespace

// as_strided and as_strided_scatter against the same windows walked on the host, on fresh
// random values, over a base that is itself a view (its elements taken in row-major order).
TEST_F(OpsTest, StridedWindowsReadAndWriteTheElementsTheyName) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> draw(-1, 1);
  std::vector<float> values(24);
  for (float& v : values) v = draw(rng);
  const Tensor base = lt::from_vector(values, {4, 6}).t();  // [6, 4], not in row-major order
  std::vector<double> flat(24);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) flat[i * 4 + j] = values[j * 6 + i];
  }
  const std::vector<int64_t> sizes{2, 3}, strides{7, 2};
  const int64_t offset = 3;
  std::vector<double> window;
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) window.push_back(flat[offset + i * 7 + j * 2]);
  }
  expect_close(lt::as_strided(base, sizes, strides, offset).to_vector<double>(), window, {0, 0});

  std::vector<float> src_values(6);
  for (float& v : src_values) v = draw(rng);
  std::vector<double> scattered = flat;
  for (int64_t i = 0, k = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) scattered[offset + i * 7 + j * 2] = src_values[k++];
  }
  const Tensor out =
      lt::as_strided_scatter(base, lt::from_vector(src_values, {2, 3}), sizes, strides, offset);
  EXPECT_EQ(out.shape(), Shape({6, 4}));
  expect_close(out.to_vector<double>(), scattered, {0, 0});

  // Integers keep their values exactly; the source broadcasts to the window.
  const Tensor ids = lt::arange(12.0, DType::i64).reshape({3, 4});
  const Tensor written =
      lt::as_strided_scatter(ids, lt::from_vector({int64_t{1} << 40}, {1}), {2}, {5}, 1);
  EXPECT_EQ(written.dtype(), DType::i64);
  std::vector<int64_t> want(12);
  std::iota(want.begin(), want.end(), 0);
  want[1] = want[6] = int64_t{1} << 40;
  EXPECT_EQ(written.to_vector<int64_t>(), want);
}

TEST_F(OpsTest, StridedWindowsOutsideTheTensorAreRefused) {
  const Tensor t = lt::zeros({3, 4});
  lt_test::expect_mentions(lt_test::error_message([&] {
                             lt::as_strided(t, {2, 2}, {4, 9}, 0);
                           }),
                           {"as_strided", "reaches element 13", "[3, 4]"});
  lt_test::expect_mentions(lt_test::error_message([&] {
                             lt::as_strided(t, {2}, {1, 1}, 0);
                           }),
                           {"as_strided", "1 sizes and 2 strides"});
  lt_test::expect_mentions(
      lt_test::error_message([&] { lt::as_strided_scatter(t, lt::ones({3}), {2}, {1}, 0); }),
      {"as_strided_scatter", "[3]", "[2]"});
}

// index_add against the same sums on the host, with repeated positions, on fresh random values.
TEST_F(OpsTest, IndexAddAddsEachSliceAtItsPosition) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> draw(-1, 1);
  std::vector<float> self(4 * 3), source(5 * 3);
  for (float& v : self) v = draw(rng);
  for (float& v : source) v = draw(rng);
  const std::vector<int64_t> ids{2, 0, 2, 3, 2};
  std::vector<double> want(self.begin(), self.end());
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int c = 0; c < 3; ++c) want[ids[r] * 3 + c] += 0.5 * double{source[r * 3 + c]};
  }
  const Tensor got =
      lt::from_vector(self, {4, 3})
          .index_add(0, lt::from_vector(ids, {5}), lt::from_vector(source, {5, 3}), 0.5);
  expect_close(got.to_vector<double>(), want, kF32);
  lt_test::expect_mentions(
      lt_test::error_message([&] {
        lt::zeros({4, 3}).index_add(0, lt::from_vector(ids, {5}), lt::zeros({5, 2}));
      }),
      {"index_add", "[5, 2]", "[5, 3]"});
}

// Sorting and running sums on the device against the reference evaluator and a host sort: rows
// along every dim, ties (stable: equal values keep their order), NaN (above every number), in
// f32, f64 and i64, and the errors.
TEST_F(OpsTest, SortArgsortTopkAndCumsumMatchTheReference) {
  // NaN compared as a number of its own, so that expect_close matches NaN with NaN.
  const auto nan_as_number = [](std::vector<double> v) {
    for (double& e : v) e = std::isnan(e) ? 1e300 : e;
    return v;
  };
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> draw(-4, 4);  // few distinct values: many ties
  std::vector<double> x(6 * 37);
  for (double& v : x) v = draw(rng) * 0.5;
  x[5] = x[40] = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Tensor t = lt::from_vector(x, {6, 37}).to(dtype);
    for (int dim : {0, 1, -1}) {
      for (bool descending : {false, true}) {
        const Tensor order = lt::argsort(t, dim, descending);
        const lt::ValuesIndices sorted = lt::sort(t, dim, descending);
        const std::vector<double> want = lt::reference::evaluate(order);
        EXPECT_EQ(order.to_vector<double>(), want);
        expect_close(nan_as_number(sorted.values.to_vector<double>()),
                     nan_as_number(lt::reference::evaluate(lt::take_along_dim(t, order, dim))),
                     kF32);
      }
      expect_close(nan_as_number(lt::cumsum(t, dim).to_vector<double>()),
                   nan_as_number(lt::reference::evaluate(lt::cumsum(t, dim))), kF32);
    }
  }
  // Against a host stable sort of one row, NaN last.
  std::vector<int64_t> host(37);
  std::iota(host.begin(), host.end(), 0);
  std::stable_sort(host.begin(), host.end(), [&](int64_t a, int64_t b) {
    const double va = x[37 + a], vb = x[37 + b];
    return std::isnan(vb) ? !std::isnan(va) : va < vb;
  });
  const Tensor row = lt::from_vector(x, {6, 37}).select(0, 1);
  EXPECT_EQ(lt::argsort(row).to_vector<int64_t>(), host);
  const lt::ValuesIndices top = lt::topk(row, 3);
  std::vector<int64_t> want_top = host;
  std::stable_sort(want_top.begin(), want_top.end(), [&](int64_t a, int64_t b) {
    const double va = x[37 + a], vb = x[37 + b];
    return std::isnan(va) ? !std::isnan(vb) : va > vb;
  });
  want_top.resize(3);
  EXPECT_EQ(top.indices.to_vector<int64_t>(), want_top);
  // Integers sort and sum exactly in i64.
  const Tensor ids = lt::from_vector(std::vector<int64_t>{5, -3, 5, 0, int64_t{1} << 60}, {5});
  EXPECT_EQ(lt::sort(ids).values.to_vector<int64_t>(),
            (std::vector<int64_t>{-3, 0, 5, 5, int64_t{1} << 60}));
  EXPECT_EQ(lt::cumsum(ids, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{5, 2, 7, 7, 7 + (int64_t{1} << 60)}));
  EXPECT_EQ(lt::cumsum(lt::from_vector({true, false, true}, {3}), 0).dtype(), DType::i64);
  lt_test::expect_mentions(lt_test::error_message([&] { lt::topk(row, 38); }),
                           {"topk", "38", "37"});
  lt_test::expect_mentions(lt_test::error_message([&] { lt::sort(row, 2); }), {"sort", "dim"});
}

// Attention's batched products over heads interleaved in each row ([seq, heads * 6] viewed as
// [heads, seq, 6]): a batch stride (6) below a matrix's extent, read in place.
TEST_F(OpsTest, BatchedProductsOverInterleavedHeads) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> draw(-1, 1);
  constexpr int64_t kSeq = 8, kHeads = 2, kDim = 6;
  std::vector<float> x(kSeq * kHeads * kDim);
  for (float& v : x) v = draw(rng);
  const Tensor rows = lt::from_vector(x, {kSeq, kHeads, kDim});
  const Tensor q = rows.transpose(0, 1);     // [heads, seq, dim], strides (6, 12, 1)
  const Tensor k = rows.permute({1, 2, 0});  // [heads, dim, seq]
  std::vector<double> want;
  for (int64_t h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < kSeq; ++i) {
      for (int64_t j = 0; j < kSeq; ++j) {
        double sum = 0;
        for (int64_t d = 0; d < kDim; ++d) {
          sum += double{x[(i * kHeads + h) * kDim + d]} * x[(j * kHeads + h) * kDim + d];
        }
        want.push_back(sum);
      }
    }
  }
  expect_close(lt::bmm(q, k).to_vector<double>(), want, kF32);
}
