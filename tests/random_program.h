#pragma once
// Random lazy-tensor programs for differential tests (fusion_test, fuzz_test). A program runs a
// few steps; each step applies random ops (broadcasting, mixed f32/f64, in-place updates,
// aliased handles, shared subexpressions, reductions, reads before mark_step) to a pool of
// tensors, drops some of them (dead tensors), takes the reference value of every live one,
// calls mark_step and compares. Live tensors carry over to the next step.
//
// Every value carries an interval and a forward error bound (interval arithmetic plus a
// rounding term per op), so each comparison's tolerance follows from the program itself. Ops
// whose operands leave the op's domain, or whose error bound would swamp the value, are never
// drawn: no NaN is produced and a tolerance never hides a wrong value.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lt_test {

using lt::DType;
using lt::Shape;
using lt::Tensor;

// Every element's exact value lies in [lo, hi]; the engine's value is within err of it.
struct Bound {
  double lo = 0;
  double hi = 0;
  double err = 0;
  double mag() const { return std::max(std::abs(lo), std::abs(hi)); }
};

// The relative rounding error of one op. f64 counts twice: the double reference rounds as well.
inline double unit(DType dtype) {
  return dtype == DType::f32 ? 0x1p-24 : 0x1p-52;
}

namespace bounds {

// libm's exp, log, tanh and pow are within a few ulps; sigmoid and rsqrt chain two roundings.
constexpr double kTranscendental = 8;

// A scalar as a kernel of the op's dtype sees it.
inline Bound scalar(double s, double u) {
  return {s, s, u * std::abs(s)};
}
// Relative to the value, but absolute below the normal range: u * 2^-125 is half the spacing
// of f32's subnormals (and more than f64's).
inline Bound round(Bound x, double u) {
  x.err += u * (x.mag() + 0x1p-125);
  return x;
}
inline Bound add(Bound x, Bound y) {
  return {x.lo + y.lo, x.hi + y.hi, x.err + y.err};
}
inline Bound neg(Bound x) {
  return {-x.hi, -x.lo, x.err};
}
inline Bound sub(Bound x, Bound y) {
  return add(x, neg(y));
}
inline Bound mul(Bound x, Bound y) {
  const double p[] = {x.lo * y.lo, x.lo * y.hi, x.hi * y.lo, x.hi * y.hi};
  return {*std::min_element(p, p + 4), *std::max_element(p, p + 4),
          x.err * y.mag() + y.err * x.mag() + x.err * y.err};
}
// The smallest |value| the engine may hold: positive when x keeps away from zero.
inline double gap(Bound x) {
  return std::max(x.lo, -x.hi) - x.err;
}
inline Bound div(Bound x, Bound y) {  // needs gap(y) > 0
  Bound q = mul(x, Bound{1 / y.hi, 1 / y.lo, 0});
  q.err = (x.err + q.mag() * y.err) / gap(y);
  return q;
}
inline Bound abs(Bound x) {
  if (x.lo >= 0) return x;
  if (x.hi <= 0) return neg(x);
  return {0, x.mag(), x.err};
}
inline Bound maximum(Bound x, Bound y) {
  return {std::max(x.lo, y.lo), std::max(x.hi, y.hi), std::max(x.err, y.err)};
}
inline Bound minimum(Bound x, Bound y) {
  return {std::min(x.lo, y.lo), std::min(x.hi, y.hi), std::max(x.err, y.err)};
}
// f monotone on the values the engine may hold, with |f'| <= slope there.
inline Bound through(Bound x, double (*f)(double), double slope, double u) {
  const double a = f(x.lo), b = f(x.hi);
  return round({std::min(a, b), std::max(a, b), slope * x.err}, kTranscendental * u);
}
inline Bound pow(Bound x, double e, double u) {
  std::vector<double> at = {std::pow(x.lo, e), std::pow(x.hi, e)};
  if (x.lo < 0 && x.hi > 0) at.push_back(std::pow(0.0, e));
  // |d/dx x^e| = |e| |x|^(e-1): largest at the largest |x| for e >= 1, else at the smallest.
  const double slope =
      e == 0 ? 0 : std::abs(e) * std::pow(e >= 1 ? x.mag() + x.err : gap(x), e - 1);
  return round({*std::min_element(at.begin(), at.end()), *std::max_element(at.begin(), at.end()),
                slope * x.err},
               kTranscendental * u);
}
// a + w * (b - a), rounded as the kernel computes it.
inline Bound lerp(Bound a, Bound b, Bound w, double u) {
  return round(add(a, round(mul(w, round(sub(b, a), u)), u)), u);
}

}  // namespace bounds

// The scalars an op draws.
enum class Draw { none, any, nonzero, weight, exponent, range };

struct Form {
  const char* text;
  std::function<Tensor(const Tensor* t, const double* s)> fn;
};
struct InPlaceForm {
  const char* text;
  std::function<void(Tensor& self, const Tensor* t, const double* s)> fn;  // t[0] is self
};

// One op of the Tensor API: its operands, its domain, how it moves the bound, and the ways
// to call it (methods, operators and free functions; in place or not).
struct OpCase {
  int arity;
  Draw draw;
  std::function<bool(const Bound* b, const double* s)> ok;
  std::function<Bound(const Bound* b, const double* s, double u)> bound;
  std::vector<Form> forms;
  std::vector<InPlaceForm> in_place;
  bool self_dtype = false;  // copy_ and fill_ compute in the target's dtype
};

inline const std::vector<OpCase>& op_cases() {
  namespace b = bounds;
  using Bs = const Bound*;
  using Ss = const double*;
  using Ts = const Tensor*;
  static const std::vector<OpCase> cases = [] {
    const auto any = [](Bs, Ss) { return true; };
    const auto positive = [](Bs x, Ss) { return x[0].lo - x[0].err >= 0.25; };
    std::vector<OpCase> c;
    // Ops of one tensor.
    c.push_back(
        {1,
         Draw::none,
         any,
         [](Bs x, Ss, double) { return b::neg(x[0]); },
         {{"a.neg()", [](Ts t, Ss) { return t[0].neg(); }}, {"-a", [](Ts t, Ss) { return -t[0]; }}},
         {{"a.neg_()", [](Tensor& a, Ts, Ss) { a.neg_(); }}}});
    c.push_back({1,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double) { return b::abs(x[0]); },
                 {{"a.abs()", [](Ts t, Ss) { return t[0].abs(); }}},
                 {{"a.abs_()", [](Tensor& a, Ts, Ss) { a.abs_(); }}}});
    c.push_back({1,
                 Draw::none,
                 positive,
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return std::sqrt(v); },
                       0.5 / std::sqrt(x[0].lo - x[0].err), u);
                 },
                 {{"a.sqrt()", [](Ts t, Ss) { return t[0].sqrt(); }}},
                 {{"a.sqrt_()", [](Tensor& a, Ts, Ss) { a.sqrt_(); }}}});
    c.push_back({1,
                 Draw::none,
                 positive,
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return 1 / std::sqrt(v); },
                       0.5 * std::pow(x[0].lo - x[0].err, -1.5), u);
                 },
                 {{"a.rsqrt()", [](Ts t, Ss) { return t[0].rsqrt(); }}},
                 {{"a.rsqrt_()", [](Tensor& a, Ts, Ss) { a.rsqrt_(); }}}});
    c.push_back({1,
                 Draw::none,
                 [](Bs x, Ss) { return x[0].hi + x[0].err <= 3; },
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return std::exp(v); }, std::exp(x[0].hi + x[0].err), u);
                 },
                 {{"a.exp()", [](Ts t, Ss) { return t[0].exp(); }}},
                 {{"a.exp_()", [](Tensor& a, Ts, Ss) { a.exp_(); }}}});
    c.push_back({1,
                 Draw::none,
                 positive,
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return std::log(v); }, 1 / (x[0].lo - x[0].err), u);
                 },
                 {{"a.log()", [](Ts t, Ss) { return t[0].log(); }}},
                 {{"a.log_()", [](Tensor& a, Ts, Ss) { a.log_(); }}}});
    c.push_back({1,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return std::tanh(v); }, 1, u);
                 },
                 {{"a.tanh()", [](Ts t, Ss) { return t[0].tanh(); }}},
                 {{"a.tanh_()", [](Tensor& a, Ts, Ss) { a.tanh_(); }}}});
    c.push_back({1,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) {
                   return b::through(
                       x[0], [](double v) { return 1 / (1 + std::exp(-v)); }, 0.25, u);
                 },
                 {{"a.sigmoid()", [](Ts t, Ss) { return t[0].sigmoid(); }}},
                 {{"a.sigmoid_()", [](Tensor& a, Ts, Ss) { a.sigmoid_(); }}}});
    c.push_back({1,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double) {
                   return Bound{std::max(x[0].lo, 0.0), std::max(x[0].hi, 0.0), x[0].err};
                 },
                 {{"a.relu()", [](Ts t, Ss) { return t[0].relu(); }}},
                 {{"a.relu_()", [](Tensor& a, Ts, Ss) { a.relu_(); }}}});
    c.push_back({1,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double) { return x[0]; },
                 {{"a.clone()", [](Ts t, Ss) { return t[0].clone(); }}},
                 {}});
    // With a scalar operand.
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::round(b::add(x[0], b::scalar(s[0], u)), u); },
                 {{"a.add(s)", [](Ts t, Ss s) { return t[0].add(s[0]); }},
                  {"a + s", [](Ts t, Ss s) { return t[0] + s[0]; }},
                  {"s + a", [](Ts t, Ss s) { return s[0] + t[0]; }}},
                 {{"a.add_(s)", [](Tensor& a, Ts, Ss s) { a.add_(s[0]); }}}});
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::round(b::sub(x[0], b::scalar(s[0], u)), u); },
                 {{"a.sub(s)", [](Ts t, Ss s) { return t[0].sub(s[0]); }},
                  {"a - s", [](Ts t, Ss s) { return t[0] - s[0]; }}},
                 {{"a.sub_(s)", [](Tensor& a, Ts, Ss s) { a.sub_(s[0]); }}}});
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::round(b::sub(b::scalar(s[0], u), x[0]), u); },
                 {{"s - a", [](Ts t, Ss s) { return s[0] - t[0]; }}},
                 {}});
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::round(b::mul(x[0], b::scalar(s[0], u)), u); },
                 {{"a.mul(s)", [](Ts t, Ss s) { return t[0].mul(s[0]); }},
                  {"a * s", [](Ts t, Ss s) { return t[0] * s[0]; }},
                  {"s * a", [](Ts t, Ss s) { return s[0] * t[0]; }}},
                 {{"a.mul_(s)", [](Tensor& a, Ts, Ss s) { a.mul_(s[0]); }}}});
    c.push_back({1,
                 Draw::nonzero,
                 any,
                 [](Bs x, Ss s, double u) { return b::round(b::div(x[0], b::scalar(s[0], u)), u); },
                 {{"a.div(s)", [](Ts t, Ss s) { return t[0].div(s[0]); }},
                  {"a / s", [](Ts t, Ss s) { return t[0] / s[0]; }}},
                 {{"a.div_(s)", [](Tensor& a, Ts, Ss s) { a.div_(s[0]); }}}});
    c.push_back({1,
                 Draw::any,
                 [](Bs x, Ss) { return b::gap(x[0]) >= 0.25; },
                 [](Bs x, Ss s, double u) { return b::round(b::div(b::scalar(s[0], u), x[0]), u); },
                 {{"s / a", [](Ts t, Ss s) { return s[0] / t[0]; }}},
                 {}});
    c.push_back({1,
                 Draw::exponent,
                 [](Bs x, Ss s) {
                   if (s[0] != std::floor(s[0])) return x[0].lo - x[0].err >= 0.25;
                   return s[0] >= 0 || b::gap(x[0]) >= 0.25;
                 },
                 [](Bs x, Ss s, double u) { return b::pow(x[0], s[0], u); },
                 {{"a.pow(s)", [](Ts t, Ss s) { return t[0].pow(s[0]); }}},
                 {{"a.pow_(s)", [](Tensor& a, Ts, Ss s) { a.pow_(s[0]); }}}});
    c.push_back({1,
                 Draw::range,
                 any,
                 [](Bs x, Ss s, double u) {
                   return Bound{std::clamp(x[0].lo, s[0], s[1]), std::clamp(x[0].hi, s[0], s[1]),
                                x[0].err + u * std::max(std::abs(s[0]), std::abs(s[1]))};
                 },
                 {{"a.clamp(s, s1)", [](Ts t, Ss s) { return t[0].clamp(s[0], s[1]); }}},
                 {{"a.clamp_(s, s1)", [](Tensor& a, Ts, Ss s) { a.clamp_(s[0], s[1]); }}}});
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::maximum(x[0], b::scalar(s[0], u)); },
                 {{"a.clamp_min(s)", [](Ts t, Ss s) { return t[0].clamp_min(s[0]); }}},
                 {{"a.clamp_min_(s)", [](Tensor& a, Ts, Ss s) { a.clamp_min_(s[0]); }}}});
    c.push_back({1,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) { return b::minimum(x[0], b::scalar(s[0], u)); },
                 {{"a.clamp_max(s)", [](Ts t, Ss s) { return t[0].clamp_max(s[0]); }}},
                 {{"a.clamp_max_(s)", [](Tensor& a, Ts, Ss s) { a.clamp_max_(s[0]); }}}});
    OpCase fill{1,   Draw::any,
                any, [](Bs, Ss s, double u) { return b::scalar(s[0], u); },
                {},  {{"a.fill_(s)", [](Tensor& a, Ts, Ss s) { a.fill_(s[0]); }}}};
    fill.self_dtype = true;
    c.push_back(fill);
    OpCase zero{1,   Draw::none,
                any, [](Bs, Ss, double) { return Bound{}; },
                {},  {{"a.zero_()", [](Tensor& a, Ts, Ss) { a.zero_(); }}}};
    zero.self_dtype = true;
    c.push_back(zero);
    // Ops of two tensors.
    c.push_back({2,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) { return b::round(b::add(x[0], x[1]), u); },
                 {{"a.add(b)", [](Ts t, Ss) { return t[0].add(t[1]); }},
                  {"a + b", [](Ts t, Ss) { return t[0] + t[1]; }},
                  {"lt::add(a, b)", [](Ts t, Ss) { return lt::add(t[0], t[1]); }}},
                 {{"a.add_(b)", [](Tensor& a, Ts t, Ss) { a.add_(t[1]); }}}});
    c.push_back({2,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) {
                   return b::round(b::add(x[0], b::round(b::mul(x[1], b::scalar(s[0], u)), u)), u);
                 },
                 {{"a.add(b, s)", [](Ts t, Ss s) { return t[0].add(t[1], s[0]); }},
                  {"lt::add(a, b, s)", [](Ts t, Ss s) { return lt::add(t[0], t[1], s[0]); }}},
                 {{"a.add_(b, s)", [](Tensor& a, Ts t, Ss s) { a.add_(t[1], s[0]); }}}});
    c.push_back({2,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) { return b::round(b::sub(x[0], x[1]), u); },
                 {{"a.sub(b)", [](Ts t, Ss) { return t[0].sub(t[1]); }},
                  {"a - b", [](Ts t, Ss) { return t[0] - t[1]; }},
                  {"lt::sub(a, b)", [](Ts t, Ss) { return lt::sub(t[0], t[1]); }}},
                 {{"a.sub_(b)", [](Tensor& a, Ts t, Ss) { a.sub_(t[1]); }}}});
    c.push_back({2,
                 Draw::any,
                 any,
                 [](Bs x, Ss s, double u) {
                   return b::round(b::sub(x[0], b::round(b::mul(x[1], b::scalar(s[0], u)), u)), u);
                 },
                 {{"a.sub(b, s)", [](Ts t, Ss s) { return t[0].sub(t[1], s[0]); }},
                  {"lt::sub(a, b, s)", [](Ts t, Ss s) { return lt::sub(t[0], t[1], s[0]); }}},
                 {{"a.sub_(b, s)", [](Tensor& a, Ts t, Ss s) { a.sub_(t[1], s[0]); }}}});
    c.push_back({2,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) { return b::round(b::mul(x[0], x[1]), u); },
                 {{"a.mul(b)", [](Ts t, Ss) { return t[0].mul(t[1]); }},
                  {"a * b", [](Ts t, Ss) { return t[0] * t[1]; }},
                  {"lt::mul(a, b)", [](Ts t, Ss) { return lt::mul(t[0], t[1]); }}},
                 {{"a.mul_(b)", [](Tensor& a, Ts t, Ss) { a.mul_(t[1]); }}}});
    c.push_back({2,
                 Draw::none,
                 [](Bs x, Ss) { return b::gap(x[1]) >= 0.25; },
                 [](Bs x, Ss, double u) { return b::round(b::div(x[0], x[1]), u); },
                 {{"a.div(b)", [](Ts t, Ss) { return t[0].div(t[1]); }},
                  {"a / b", [](Ts t, Ss) { return t[0] / t[1]; }},
                  {"lt::div(a, b)", [](Ts t, Ss) { return lt::div(t[0], t[1]); }}},
                 {{"a.div_(b)", [](Tensor& a, Ts t, Ss) { a.div_(t[1]); }}}});
    c.push_back({2,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double) { return b::maximum(x[0], x[1]); },
                 {{"a.maximum(b)", [](Ts t, Ss) { return t[0].maximum(t[1]); }},
                  {"lt::maximum(a, b)", [](Ts t, Ss) { return lt::maximum(t[0], t[1]); }}},
                 {{"a.maximum_(b)", [](Tensor& a, Ts t, Ss) { a.maximum_(t[1]); }}}});
    c.push_back({2,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double) { return b::minimum(x[0], x[1]); },
                 {{"a.minimum(b)", [](Ts t, Ss) { return t[0].minimum(t[1]); }},
                  {"lt::minimum(a, b)", [](Ts t, Ss) { return lt::minimum(t[0], t[1]); }}},
                 {{"a.minimum_(b)", [](Tensor& a, Ts t, Ss) { a.minimum_(t[1]); }}}});
    c.push_back({2,
                 Draw::weight,
                 any,
                 [](Bs x, Ss s, double u) { return b::lerp(x[0], x[1], b::scalar(s[0], u), u); },
                 {{"a.lerp(b, s)", [](Ts t, Ss s) { return t[0].lerp(t[1], s[0]); }}},
                 {{"a.lerp_(b, s)", [](Tensor& a, Ts t, Ss s) { a.lerp_(t[1], s[0]); }}}});
    OpCase copy{2,   Draw::none,
                any, [](Bs x, Ss, double) { return x[1]; },
                {},  {{"a.copy_(b)", [](Tensor& a, Ts t, Ss) { a.copy_(t[1]); }}}};
    copy.self_dtype = true;
    c.push_back(copy);
    // Ops of three tensors.
    c.push_back({3,
                 Draw::none,
                 any,
                 [](Bs x, Ss, double u) { return b::lerp(x[0], x[1], x[2], u); },
                 {{"a.lerp(b, c)", [](Ts t, Ss) { return t[0].lerp(t[1], t[2]); }}},
                 {{"a.lerp_(b, c)", [](Tensor& a, Ts t, Ss) { a.lerp_(t[1], t[2]); }}}});
    c.push_back(
        {3,
         Draw::any,
         any,
         [](Bs x, Ss s, double u) {
           const Bound term =
               b::round(b::mul(b::round(b::mul(b::scalar(s[0], u), x[1]), u), x[2]), u);
           return b::round(b::add(x[0], term), u);
         },
         {{"a.addcmul(b, c, s)", [](Ts t, Ss s) { return t[0].addcmul(t[1], t[2], s[0]); }}},
         {{"a.addcmul_(b, c, s)", [](Tensor& a, Ts t, Ss s) { a.addcmul_(t[1], t[2], s[0]); }}}});
    c.push_back(
        {3,
         Draw::any,
         [](Bs x, Ss) { return b::gap(x[2]) >= 0.25; },
         [](Bs x, Ss s, double u) {
           const Bound term =
               b::round(b::div(b::round(b::mul(b::scalar(s[0], u), x[1]), u), x[2]), u);
           return b::round(b::add(x[0], term), u);
         },
         {{"a.addcdiv(b, c, s)", [](Ts t, Ss s) { return t[0].addcdiv(t[1], t[2], s[0]); }}},
         {{"a.addcdiv_(b, c, s)", [](Tensor& a, Ts t, Ss s) { a.addcdiv_(t[1], t[2], s[0]); }}}});
    return c;
  }();
  return cases;
}

struct ProgramOptions {
  int steps = 3;
  int min_ops = 3;
  int max_ops = 12;
  bool reductions = true;
  bool mixed_dtypes = true;
  bool large_shapes = true;    // sometimes shapes spanning several tiles and work units
  double partial_sync = 0.05;  // chance, per op, of reading a pending tensor before mark_step
};

inline std::optional<Shape> broadcast(const Shape& a, const Shape& b) {
  const int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    const int ia = i - (rank - a.rank());
    const int ib = i - (rank - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1;
    const int64_t db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    dims[i] = da == 1 ? db : da;
  }
  return Shape(dims);
}

// PyTorch's type promotion as the engine documents it: operands with dimensions decide the
// dtype; rank-0 tensors decide only when every operand is rank 0.
inline DType op_dtype(const std::vector<Tensor>& operands) {
  std::optional<DType> dims, zero_dim;
  for (const Tensor& t : operands) {
    std::optional<DType>& d = t.dim() > 0 ? dims : zero_dim;
    d = d ? lt::promote_types(*d, t.dtype()) : t.dtype();
  }
  return dims ? *dims : *zero_dim;
}

// Turns a hang into a failure. A kernel that never finishes blocks the device stream, and with
// it every later test, so on timeout this prints what was running and ends the process.
class Watchdog {
 public:
  Watchdog(double seconds, std::function<std::string()> what)
      : thread_([this, seconds, what = std::move(what)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return done_; })) {
            return;
          }
          std::fprintf(stderr, "FAILED: no progress for %.0f s (a hang): %s\n", seconds,
                       what().c_str());
          std::_Exit(1);
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest is initialized
};

class RandomProgram {
 public:
  // `label` names the program (its seed) in the message of a hang.
  RandomProgram(uint64_t seed, ProgramOptions options, std::string label)
      : options_(options), rng_(seed), label_(std::move(label)) {}

  // Runs every step and reports mismatches through gtest, followed by the program's trace.
  void run() {
    const Watchdog watchdog(kHangSeconds, [this] { return label_ + "\n" + trace_.str(); });
    base_ = draw_base();
    log("base shape " + base_.str());
    for (int step = 1; step <= options_.steps && !failed_; ++step) run_step(step);
    if (failed_) ADD_FAILURE() << "the program so far:\n" << trace_.str();
  }

 private:
  struct Slot {
    Tensor t;
    std::shared_ptr<Bound> bound;  // shared by aliased handles, as their values are
    std::string name;
  };

  void run_step(int step) {
    log("-- step " + std::to_string(step));
    const int ops = options_.min_ops + below(options_.max_ops - options_.min_ops + 1);
    for (int i = 0; i < ops && !failed_; ++i) random_action();
    if (failed_) return;

    // Drop some tensors before the step: they are dead and must not be computed.
    std::vector<Slot> kept;
    for (Slot& slot : pool_) {
      if (chance(0.6) && kept.size() < 8) kept.push_back(std::move(slot));
    }
    if (kept.empty()) kept.push_back(std::move(pool_.back()));
    pool_ = std::move(kept);
    std::string names;
    for (const Slot& slot : pool_) names += " " + slot.name;
    log("live:" + names);

    std::vector<std::vector<double>> want;
    std::set<const void*> pending;
    for (const Slot& slot : pool_) {
      want.push_back(lt::reference::evaluate(slot.t));
      if (slot.t.is_pending()) pending.insert(slot.t.impl().get());
    }
    const int64_t steps_before = lt::last_step_stats().step;
    lt::mark_step();
    // Dead tensors are no outputs, and tensors that share a value share one. (A step may launch
    // nothing when every pending tensor just names existing data, as after copy_.)
    if (lt::last_step_stats().step != steps_before) {
      EXPECT_LE(lt::last_step_stats().outputs, static_cast<int64_t>(pending.size()));
    }
    for (size_t i = 0; i < pool_.size() && !failed_; ++i) {
      EXPECT_FALSE(pool_[i].t.is_pending()) << pool_[i].name;
      check(pool_[i], want[i], "after mark_step " + std::to_string(step));
    }
  }

  void random_action() {
    for (int attempt = 0; attempt < 20; ++attempt) {
      const int choice = below(100);
      if (pool_.empty() || choice < 10) {
        add(new_leaf(sub_shape(base_)));
        return;
      }
      if (choice < 14) {
        alias();
        return;
      }
      if (choice < 14 + static_cast<int>(options_.partial_sync * 100)) {
        if (partial_sync()) return;
        continue;
      }
      if (choice < 45) {
        if (in_place()) return;
        continue;
      }
      if (choice < 55 && options_.reductions) {
        if (reduction()) return;
        continue;
      }
      if (choice < 60 && options_.mixed_dtypes) {
        if (cast()) return;
        continue;
      }
      if (out_of_place()) return;
    }
    add(new_leaf(sub_shape(base_)));
  }

  // --- Actions. ---

  bool out_of_place() {
    const OpCase& op = op_cases()[below(static_cast<int>(op_cases().size()))];
    if (op.forms.empty()) return false;
    std::vector<size_t> in = {static_cast<size_t>(below(static_cast<int>(pool_.size())))};
    Shape shape = pool_[in[0]].t.shape();
    for (int k = 1; k < op.arity; ++k) {
      in.push_back(operand(shape, /*into=*/false));
      shape = *broadcast(shape, pool_[in.back()].t.shape());
    }
    std::vector<Tensor> ts;
    for (size_t i : in) ts.push_back(pool_[i].t);
    const DType dtype = op_dtype(ts);
    const std::vector<double> s = scalars(op.draw);
    const std::vector<Bound> bs = converted(in, dtype);
    if (!op.ok(bs.data(), s.data())) return false;
    const Bound result = op.bound(bs.data(), s.data(), unit(dtype));
    if (!acceptable(result)) return false;
    const Form& form = op.forms[below(static_cast<int>(op.forms.size()))];
    Tensor t = form.fn(ts.data(), s.data());
    const std::string name = fresh_name();
    log(name + " = " + describe(form.text, in, s) + " -> " + lt::dtype_name(t.dtype()) + " " +
        t.shape().str());
    EXPECT_EQ(t.shape().str(), shape.str()) << name;
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(dtype)) << name;
    add({t, std::make_shared<Bound>(result), name});
    return true;
  }

  bool in_place() {
    const OpCase& op = op_cases()[below(static_cast<int>(op_cases().size()))];
    if (op.in_place.empty()) return false;
    const size_t target = below(static_cast<int>(pool_.size()));
    const Shape shape = pool_[target].t.shape();
    std::vector<size_t> in = {target};
    for (int k = 1; k < op.arity; ++k) in.push_back(operand(shape, /*into=*/true));
    std::vector<Tensor> ts;
    for (size_t i : in) ts.push_back(pool_[i].t);
    const DType self = pool_[target].t.dtype();
    const DType dtype = op.self_dtype ? self : op_dtype(ts);
    const std::vector<double> s = scalars(op.draw);
    const std::vector<Bound> bs = converted(in, dtype);
    if (!op.ok(bs.data(), s.data())) return false;
    Bound result = op.bound(bs.data(), s.data(), unit(dtype));
    // The result is cast to the target's dtype.
    if (self == DType::f32 && dtype == DType::f64) result = bounds::round(result, unit(self));
    if (!acceptable(result)) return false;
    const InPlaceForm& form = op.in_place[below(static_cast<int>(op.in_place.size()))];
    log(pool_[target].name + ": " + describe(form.text, in, s));
    form.fn(pool_[target].t, ts.data(), s.data());
    EXPECT_EQ(pool_[target].t.shape().str(), shape.str()) << pool_[target].name;
    EXPECT_STREQ(lt::dtype_name(pool_[target].t.dtype()), lt::dtype_name(self))
        << pool_[target].name;
    *pool_[target].bound = result;
    return true;
  }

  bool reduction() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const Tensor a = pool_[i].t;
    const Bound x = *pool_[i].bound;
    const int rank = a.dim();
    const bool all = rank == 0 || chance(0.3);
    std::vector<int> dims;
    bool keepdim = false;
    int64_t count = a.numel();
    if (!all) {
      count = 1;
      for (int d = 0; d < rank; ++d) {
        if (!chance(0.5)) continue;
        dims.push_back(chance(0.3) ? d - rank : d);
        count *= a.shape()[d];
      }
      std::shuffle(dims.begin(), dims.end(), rng_);
      keepdim = chance(0.5);
      if (dims.empty()) count = a.numel();  // as torch: no dims reduces them all
    }
    enum Kind { kSum, kMean, kMax, kNorm };
    Kind kind = static_cast<Kind>(below(4));
    // A max over nothing throws and a mean over nothing is NaN: sum instead.
    if (count == 0 && (kind == kMean || kind == kMax)) kind = kSum;
    const double u = unit(a.dtype());
    const double n = static_cast<double>(count);
    // Each output folds n values in double, then rounds to the dtype.
    const double fold = n * 0x1p-53 * n * x.mag();
    Bound r;
    switch (kind) {
      case kSum:
        r = bounds::round({n * x.lo, n * x.hi, n * x.err + fold}, u);
        break;
      case kMean:
        r = bounds::round({x.lo, x.hi, x.err + fold / n}, u);
        break;
      case kMax:
        r = x;
        break;
      case kNorm:
        r = bounds::round({std::sqrt(n) * std::max({x.lo, -x.hi, 0.0}), std::sqrt(n) * x.mag(),
                           std::sqrt(n) * x.err + fold},
                          u);
        break;
    }
    if (!acceptable(r)) return false;
    static constexpr const char* kNames[] = {"sum", "mean", "max", "norm"};
    using Reduce = Tensor (Tensor::*)() const;
    using ReduceDims = Tensor (Tensor::*)(const std::vector<int>&, bool) const;
    static constexpr Reduce kAll[] = {&Tensor::sum, &Tensor::mean, &Tensor::max, &Tensor::norm};
    static constexpr ReduceDims kDims[] = {&Tensor::sum, &Tensor::mean, &Tensor::max,
                                           &Tensor::norm};
    const Tensor t = all ? (a.*kAll[kind])() : (a.*kDims[kind])(dims, keepdim);
    std::string args;
    for (int d : dims) args += (args.empty() ? "" : ", ") + std::to_string(d);
    const std::string text =
        std::string("a.") + kNames[kind] +
        (all ? "()" : "({" + args + "}, " + (keepdim ? "true" : "false") + ")");
    const std::string name = fresh_name();
    log(name + " = " + describe(text.c_str(), {i}, {}) + " -> " + t.shape().str());
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(a.dtype())) << name;
    add({t, std::make_shared<Bound>(r), name});
    return true;
  }

  bool cast() {
    const size_t i = below(static_cast<int>(pool_.size()));
    const DType to = pool_[i].t.dtype() == DType::f32 ? DType::f64 : DType::f32;
    Bound r = *pool_[i].bound;
    if (to == DType::f32) r = bounds::round(r, unit(to));
    Tensor t = pool_[i].t.to(to);
    const std::string name = fresh_name();
    log(name + " = " + describe(to == DType::f32 ? "a.to(f32)" : "a.to(f64)", {i}, {}));
    EXPECT_STREQ(lt::dtype_name(t.dtype()), lt::dtype_name(to)) << name;
    add({t, std::make_shared<Bound>(r), name});
    return true;
  }

  // A second handle to the same tensor, as `q = p` in Python.
  void alias() {
    Slot copy = pool_[below(static_cast<int>(pool_.size()))];
    const std::string of = copy.name;
    copy.name = fresh_name();
    log(copy.name + " = " + of + " (the same handle)");
    add(std::move(copy));
  }

  // Reads a pending tensor before mark_step: a partial sync, which must donate nothing.
  bool partial_sync() {
    std::vector<size_t> candidates;
    for (size_t i = 0; i < pool_.size(); ++i) {
      if (pool_[i].t.is_pending()) candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    const Slot& slot = pool_[candidates[below(static_cast<int>(candidates.size()))]];
    log("read " + slot.name);
    const std::vector<double> want = lt::reference::evaluate(slot.t);
    const int64_t steps_before = lt::last_step_stats().step;
    check(slot, want, "read before mark_step");
    if (lt::last_step_stats().step != steps_before) {
      EXPECT_EQ(lt::last_step_stats().donated_buffers, 0) << "a read donated a buffer";
    }
    return true;
  }

  // --- Helpers. ---

  // Compares the engine's value with the reference, and the reference with the bound.
  void check(const Slot& slot, const std::vector<double>& want, const std::string& when) {
    const std::vector<double> got = slot.t.to_vector<double>();
    const Bound& b = *slot.bound;
    if (got.size() != want.size() || static_cast<int64_t>(got.size()) != slot.t.numel()) {
      fail(slot.name + " " + when + ": " + std::to_string(got.size()) + " values, reference has " +
           std::to_string(want.size()));
      return;
    }
    const double slack = 1e-12 * (b.mag() + b.err);  // the bound's own rounding
    for (size_t i = 0; i < got.size(); ++i) {
      const double tol = 2 * b.err + slack;
      if (!(std::abs(got[i] - want[i]) <= tol)) {
        std::ostringstream out;
        out.precision(17);
        out << slot.name << " " << when << ": element " << i << " is " << got[i] << ", reference "
            << want[i] << " (tolerance " << tol << ")";
        fail(out.str());
        return;
      }
      // The reference is exact but for its casts to f32, which round as the engine's do.
      if (!(want[i] >= b.lo - b.err - slack && want[i] <= b.hi + b.err + slack)) {
        std::ostringstream out;
        out.precision(17);
        out << slot.name << " " << when << ": reference element " << i << " is " << want[i]
            << ", outside the bound [" << b.lo << ", " << b.hi << "]";
        fail(out.str());
        return;
      }
    }
  }

  void fail(const std::string& message) {
    ADD_FAILURE() << message;
    failed_ = true;
  }

  // An operand for a value of `shape`: one that broadcasts with it, or into it (in place).
  size_t operand(const Shape& shape, bool into) {
    std::vector<size_t> candidates;
    for (size_t i = 0; i < pool_.size(); ++i) {
      const std::optional<Shape> b = broadcast(shape, pool_[i].t.shape());
      if (b && (!into || *b == shape)) candidates.push_back(i);
    }
    if (candidates.empty() || chance(0.15)) {
      add(new_leaf(sub_shape(shape)));
      return pool_.size() - 1;
    }
    return candidates[below(static_cast<int>(candidates.size()))];
  }

  // The operands' bounds, with the rounding of those cast down to the op's dtype.
  std::vector<Bound> converted(const std::vector<size_t>& in, DType dtype) const {
    std::vector<Bound> out;
    for (size_t i : in) {
      Bound b = *pool_[i].bound;
      if (dtype == DType::f32 && pool_[i].t.dtype() == DType::f64)
        b = bounds::round(b, unit(dtype));
      out.push_back(b);
    }
    return out;
  }

  static bool acceptable(const Bound& b) {
    return std::isfinite(b.lo) && std::isfinite(b.hi) && std::isfinite(b.err) && b.mag() <= 1e6 &&
           b.err <= 1e-3 * std::max(1.0, b.mag());
  }

  Slot new_leaf(const Shape& shape) {
    const DType dtype = options_.mixed_dtypes && chance(0.3) ? DType::f64 : DType::f32;
    const std::string name = fresh_name();
    const char* what = "";
    Tensor t;
    Bound b;
    static constexpr int kKinds[] = {0, 0, 0, 0, 1, 2, 3, 4, 5, 5};  // mostly varied data
    switch (kKinds[below(10)]) {
      case 0: {
        static constexpr double kRanges[][2] = {{-2, 2}, {0.5, 2}, {-2, -0.5}};
        const auto& range = kRanges[below(3)];
        std::vector<double> values(static_cast<size_t>(shape.numel()));
        for (double& v : values) {
          v = uniform(range[0], range[1]);
          if (dtype == DType::f32) v = static_cast<float>(v);
        }
        t = dtype == DType::f32
                ? lt::from_vector(std::vector<float>(values.begin(), values.end()), shape)
                : lt::from_vector(values, shape);
        if (!values.empty()) {
          b = {*std::min_element(values.begin(), values.end()),
               *std::max_element(values.begin(), values.end()), 0};
        }
        what = "from_vector";
        break;
      }
      case 1:
        t = lt::zeros(shape, dtype);
        what = "zeros";
        break;
      case 2:
        t = lt::ones(shape, dtype);
        b = {1, 1, 0};
        what = "ones";
        break;
      case 3: {
        const double v = scalars(Draw::any)[0];
        t = lt::full(shape, v, dtype);
        b = bounds::scalar(v, unit(dtype));
        what = "full";
        break;
      }
      case 4:
        t = lt::rand(shape, rng_(), dtype);
        b = {0, 1, 0};
        what = "rand";
        break;
      default:
        t = lt::randn(shape, rng_(), dtype);
        b = {-8.6, 8.6, 0};  // Box-Muller over 53-bit uniforms stays within 8.6
        what = "randn";
        break;
    }
    log(name + " = " + what + " " + lt::dtype_name(dtype) + " " + shape.str());
    return {t, std::make_shared<Bound>(b), name};
  }

  Shape draw_base() {
    if (options_.large_shapes && chance(0.08)) {
      // Several interpreter tiles, gathered tiles and work units; split reductions.
      static const Shape kLarge[] = {{66001}, {3, 1031}, {1031, 1, 5}};
      return kLarge[below(3)];
    }
    static constexpr int64_t kDims[] = {1, 2, 3, 4, 5, 7};
    std::vector<int64_t> dims(below(4));
    for (int64_t& d : dims) d = kDims[below(6)];
    if (!dims.empty() && chance(0.15)) dims[below(static_cast<int>(dims.size()))] = 0;
    return Shape(dims);
  }

  // A shape that broadcasts into `of`: a suffix of its dims, some of them 1.
  Shape sub_shape(const Shape& of) {
    const int rank = chance(0.7) ? of.rank() : below(of.rank() + 1);
    std::vector<int64_t> dims;
    for (int d = of.rank() - rank; d < of.rank(); ++d) dims.push_back(chance(0.25) ? 1 : of[d]);
    return Shape(dims);
  }

  std::vector<double> scalars(Draw draw) {
    static constexpr double kNice[] = {0, 1, -1, 0.5, -0.5, 2, -2, 0.1, 3};
    auto any = [&] { return chance(0.5) ? kNice[below(9)] : uniform(-3, 3); };
    switch (draw) {
      case Draw::none:
        return {};
      case Draw::any:
        return {any()};
      case Draw::nonzero: {
        double s = any();
        while (std::abs(s) < 0.25) s = any();
        return {s};
      }
      case Draw::weight:
        return {chance(0.5) ? kNice[below(5)] : uniform(-0.5, 1.5)};
      case Draw::exponent: {
        static constexpr double kExponents[] = {2, 3, 0.5, -0.5, 1.5, -1, 1, 0, 2.5};
        return {kExponents[below(9)]};
      }
      case Draw::range: {
        const double lo = any();
        return {lo, lo + std::abs(any())};
      }
    }
    return {};
  }

  std::string describe(const char* text, const std::vector<size_t>& in,
                       const std::vector<double>& s) const {
    std::ostringstream out;
    out << text << "  [";
    for (size_t k = 0; k < in.size(); ++k)
      out << (k ? ", " : "") << "abc"[k] << "=" << pool_[in[k]].name;
    out.precision(17);  // enough to replay the op by hand
    for (size_t k = 0; k < s.size(); ++k) out << ", s" << (k ? "1" : "") << "=" << s[k];
    out << "]";
    return out.str();
  }

  void add(Slot slot) { pool_.push_back(std::move(slot)); }
  void log(const std::string& line) { trace_ << line << "\n"; }
  std::string fresh_name() {
    std::string name = "t";  // appended, not "t" + ...: GCC 12 warns wrongly on that (-Wrestrict)
    return name += std::to_string(next_name_++);
  }

  int below(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }

  // Far beyond any program's run time, native compiles on a busy machine included.
  static constexpr double kHangSeconds = 120;

  const ProgramOptions options_;
  std::mt19937_64 rng_;
  const std::string label_;
  Shape base_;
  std::vector<Slot> pool_;
  std::ostringstream trace_;
  int next_name_ = 0;
  bool failed_ = false;
};

}  // namespace lt_test
