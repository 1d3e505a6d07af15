#pragma once
// The Tensor API's elementwise ops as random_program.h draws them: operands, domain, how each
// moves the error bound, and the ways to call it.
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "bounds.h"

namespace lt_test {

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
  std::function<Bound(const Bound* b, const double* s, const Unit& u)> bound;
  std::vector<Form> forms;
  std::vector<InPlaceForm> in_place;
  bool self_dtype = false;  // copy_ and fill_ compute in the target's dtype
};

namespace op_case_rows {

namespace b = bounds;
using Bs = const Bound*;
using Ss = const double*;
using Ts = const Tensor*;

inline bool any(Bs, Ss) {
  return true;
}
inline bool positive(Bs x, Ss) {
  return x[0].lo - x[0].err >= 0.25;
}

// Ops of one tensor.
inline void add_one_tensor_ops(std::vector<OpCase>& c) {
  c.push_back(
      {1,
       Draw::none,
       any,
       [](Bs x, Ss, const Unit&) { return b::neg(x[0]); },
       {{"a.neg()", [](Ts t, Ss) { return t[0].neg(); }}, {"-a", [](Ts t, Ss) { return -t[0]; }}},
       {{"a.neg_()", [](Tensor& a, Ts, Ss) { a.neg_(); }}}});
  c.push_back({1,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit&) { return b::abs(x[0]); },
               {{"a.abs()", [](Ts t, Ss) { return t[0].abs(); }}},
               {{"a.abs_()", [](Tensor& a, Ts, Ss) { a.abs_(); }}}});
  c.push_back({1,
               Draw::none,
               positive,
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return std::sqrt(v); },
                     0.5 / std::sqrt(x[0].lo - x[0].err), u);
               },
               {{"a.sqrt()", [](Ts t, Ss) { return t[0].sqrt(); }}},
               {{"a.sqrt_()", [](Tensor& a, Ts, Ss) { a.sqrt_(); }}}});
  c.push_back({1,
               Draw::none,
               positive,
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return 1 / std::sqrt(v); },
                     0.5 * std::pow(x[0].lo - x[0].err, -1.5), u);
               },
               {{"a.rsqrt()", [](Ts t, Ss) { return t[0].rsqrt(); }}},
               {{"a.rsqrt_()", [](Tensor& a, Ts, Ss) { a.rsqrt_(); }}}});
  c.push_back({1,
               Draw::none,
               [](Bs x, Ss) { return x[0].hi + x[0].err <= 3; },
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return std::exp(v); }, std::exp(x[0].hi + x[0].err), u);
               },
               {{"a.exp()", [](Ts t, Ss) { return t[0].exp(); }}},
               {{"a.exp_()", [](Tensor& a, Ts, Ss) { a.exp_(); }}}});
  c.push_back({1,
               Draw::none,
               positive,
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return std::log(v); }, 1 / (x[0].lo - x[0].err), u);
               },
               {{"a.log()", [](Ts t, Ss) { return t[0].log(); }}},
               {{"a.log_()", [](Tensor& a, Ts, Ss) { a.log_(); }}}});
  c.push_back({1,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return std::tanh(v); }, 1, u);
               },
               {{"a.tanh()", [](Ts t, Ss) { return t[0].tanh(); }}},
               {{"a.tanh_()", [](Tensor& a, Ts, Ss) { a.tanh_(); }}}});
  c.push_back({1,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) {
                 return b::through(
                     x[0], [](double v) { return 1 / (1 + std::exp(-v)); }, 0.25, u);
               },
               {{"a.sigmoid()", [](Ts t, Ss) { return t[0].sigmoid(); }}},
               {{"a.sigmoid_()", [](Tensor& a, Ts, Ss) { a.sigmoid_(); }}}});
  c.push_back({1,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit&) {
                 return Bound{std::max(x[0].lo, 0.0), std::max(x[0].hi, 0.0), x[0].err};
               },
               {{"a.relu()", [](Ts t, Ss) { return t[0].relu(); }}},
               {{"a.relu_()", [](Tensor& a, Ts, Ss) { a.relu_(); }}}});
  c.push_back({1,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit&) { return x[0]; },
               {{"a.clone()", [](Ts t, Ss) { return t[0].clone(); }}},
               {}});
}

// With a scalar operand.
inline void add_scalar_operand_ops(std::vector<OpCase>& c) {
  c.push_back(
      {1,
       Draw::any,
       any,
       [](Bs x, Ss s, const Unit& u) { return b::round(b::add(x[0], b::scalar(s[0], u)), u); },
       {{"a.add(s)", [](Ts t, Ss s) { return t[0].add(s[0]); }},
        {"a + s", [](Ts t, Ss s) { return t[0] + s[0]; }},
        {"s + a", [](Ts t, Ss s) { return s[0] + t[0]; }}},
       {{"a.add_(s)", [](Tensor& a, Ts, Ss s) { a.add_(s[0]); }}}});
  c.push_back(
      {1,
       Draw::any,
       any,
       [](Bs x, Ss s, const Unit& u) { return b::round(b::sub(x[0], b::scalar(s[0], u)), u); },
       {{"a.sub(s)", [](Ts t, Ss s) { return t[0].sub(s[0]); }},
        {"a - s", [](Ts t, Ss s) { return t[0] - s[0]; }}},
       {{"a.sub_(s)", [](Tensor& a, Ts, Ss s) { a.sub_(s[0]); }}}});
  c.push_back(
      {1,
       Draw::any,
       any,
       [](Bs x, Ss s, const Unit& u) { return b::round(b::sub(b::scalar(s[0], u), x[0]), u); },
       {{"s - a", [](Ts t, Ss s) { return s[0] - t[0]; }}},
       {}});
  c.push_back(
      {1,
       Draw::any,
       any,
       [](Bs x, Ss s, const Unit& u) { return b::round(b::mul(x[0], b::scalar(s[0], u)), u); },
       {{"a.mul(s)", [](Ts t, Ss s) { return t[0].mul(s[0]); }},
        {"a * s", [](Ts t, Ss s) { return t[0] * s[0]; }},
        {"s * a", [](Ts t, Ss s) { return s[0] * t[0]; }}},
       {{"a.mul_(s)", [](Tensor& a, Ts, Ss s) { a.mul_(s[0]); }}}});
  c.push_back(
      {1,
       Draw::nonzero,
       any,
       [](Bs x, Ss s, const Unit& u) { return b::round(b::div(x[0], b::scalar(s[0], u)), u); },
       {{"a.div(s)", [](Ts t, Ss s) { return t[0].div(s[0]); }},
        {"a / s", [](Ts t, Ss s) { return t[0] / s[0]; }}},
       {{"a.div_(s)", [](Tensor& a, Ts, Ss s) { a.div_(s[0]); }}}});
  c.push_back(
      {1,
       Draw::any,
       [](Bs x, Ss) { return b::gap(x[0]) >= 0.25; },
       [](Bs x, Ss s, const Unit& u) { return b::round(b::div(b::scalar(s[0], u), x[0]), u); },
       {{"s / a", [](Ts t, Ss s) { return s[0] / t[0]; }}},
       {}});
  c.push_back({1,
               Draw::exponent,
               [](Bs x, Ss s) {
                 if (s[0] != std::floor(s[0])) return x[0].lo - x[0].err >= 0.25;
                 return s[0] >= 0 || b::gap(x[0]) >= 0.25;
               },
               [](Bs x, Ss s, const Unit& u) { return b::pow(x[0], s[0], u); },
               {{"a.pow(s)", [](Ts t, Ss s) { return t[0].pow(s[0]); }}},
               {{"a.pow_(s)", [](Tensor& a, Ts, Ss s) { a.pow_(s[0]); }}}});
  c.push_back({1,
               Draw::range,
               any,
               [](Bs x, Ss s, const Unit& u) {
                 return Bound{std::clamp(x[0].lo, s[0], s[1]), std::clamp(x[0].hi, s[0], s[1]),
                              x[0].err + u.op() * std::max(std::abs(s[0]), std::abs(s[1]))};
               },
               {{"a.clamp(s, s1)", [](Ts t, Ss s) { return t[0].clamp(s[0], s[1]); }}},
               {{"a.clamp_(s, s1)", [](Tensor& a, Ts, Ss s) { a.clamp_(s[0], s[1]); }}}});
  c.push_back({1,
               Draw::any,
               any,
               [](Bs x, Ss s, const Unit& u) { return b::maximum(x[0], b::scalar(s[0], u)); },
               {{"a.clamp_min(s)", [](Ts t, Ss s) { return t[0].clamp_min(s[0]); }}},
               {{"a.clamp_min_(s)", [](Tensor& a, Ts, Ss s) { a.clamp_min_(s[0]); }}}});
  c.push_back({1,
               Draw::any,
               any,
               [](Bs x, Ss s, const Unit& u) { return b::minimum(x[0], b::scalar(s[0], u)); },
               {{"a.clamp_max(s)", [](Ts t, Ss s) { return t[0].clamp_max(s[0]); }}},
               {{"a.clamp_max_(s)", [](Tensor& a, Ts, Ss s) { a.clamp_max_(s[0]); }}}});
  OpCase fill{1,   Draw::any,
              any, [](Bs, Ss s, const Unit& u) { return b::scalar(s[0], u); },
              {},  {{"a.fill_(s)", [](Tensor& a, Ts, Ss s) { a.fill_(s[0]); }}}};
  fill.self_dtype = true;
  c.push_back(fill);
  OpCase zero{1,   Draw::none,
              any, [](Bs, Ss, const Unit&) { return Bound{}; },
              {},  {{"a.zero_()", [](Tensor& a, Ts, Ss) { a.zero_(); }}}};
  zero.self_dtype = true;
  c.push_back(zero);
}

// Ops of two tensors.
inline void add_two_tensor_ops(std::vector<OpCase>& c) {
  c.push_back({2,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) { return b::round(b::add(x[0], x[1]), u); },
               {{"a.add(b)", [](Ts t, Ss) { return t[0].add(t[1]); }},
                {"a + b", [](Ts t, Ss) { return t[0] + t[1]; }},
                {"lt::add(a, b)", [](Ts t, Ss) { return lt::add(t[0], t[1]); }}},
               {{"a.add_(b)", [](Tensor& a, Ts t, Ss) { a.add_(t[1]); }}}});
  c.push_back({2,
               Draw::any,
               any,
               [](Bs x, Ss s, const Unit& u) {
                 return b::round(b::add(x[0], b::round(b::mul(x[1], b::scalar(s[0], u)), u)), u);
               },
               {{"a.add(b, s)", [](Ts t, Ss s) { return t[0].add(t[1], s[0]); }},
                {"lt::add(a, b, s)", [](Ts t, Ss s) { return lt::add(t[0], t[1], s[0]); }}},
               {{"a.add_(b, s)", [](Tensor& a, Ts t, Ss s) { a.add_(t[1], s[0]); }}}});
  c.push_back({2,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) { return b::round(b::sub(x[0], x[1]), u); },
               {{"a.sub(b)", [](Ts t, Ss) { return t[0].sub(t[1]); }},
                {"a - b", [](Ts t, Ss) { return t[0] - t[1]; }},
                {"lt::sub(a, b)", [](Ts t, Ss) { return lt::sub(t[0], t[1]); }}},
               {{"a.sub_(b)", [](Tensor& a, Ts t, Ss) { a.sub_(t[1]); }}}});
  c.push_back({2,
               Draw::any,
               any,
               [](Bs x, Ss s, const Unit& u) {
                 return b::round(b::sub(x[0], b::round(b::mul(x[1], b::scalar(s[0], u)), u)), u);
               },
               {{"a.sub(b, s)", [](Ts t, Ss s) { return t[0].sub(t[1], s[0]); }},
                {"lt::sub(a, b, s)", [](Ts t, Ss s) { return lt::sub(t[0], t[1], s[0]); }}},
               {{"a.sub_(b, s)", [](Tensor& a, Ts t, Ss s) { a.sub_(t[1], s[0]); }}}});
  c.push_back({2,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) { return b::round(b::mul(x[0], x[1]), u); },
               {{"a.mul(b)", [](Ts t, Ss) { return t[0].mul(t[1]); }},
                {"a * b", [](Ts t, Ss) { return t[0] * t[1]; }},
                {"lt::mul(a, b)", [](Ts t, Ss) { return lt::mul(t[0], t[1]); }}},
               {{"a.mul_(b)", [](Tensor& a, Ts t, Ss) { a.mul_(t[1]); }}}});
  c.push_back({2,
               Draw::none,
               [](Bs x, Ss) { return b::gap(x[1]) >= 0.25; },
               [](Bs x, Ss, const Unit& u) { return b::round(b::div(x[0], x[1]), u); },
               {{"a.div(b)", [](Ts t, Ss) { return t[0].div(t[1]); }},
                {"a / b", [](Ts t, Ss) { return t[0] / t[1]; }},
                {"lt::div(a, b)", [](Ts t, Ss) { return lt::div(t[0], t[1]); }}},
               {{"a.div_(b)", [](Tensor& a, Ts t, Ss) { a.div_(t[1]); }}}});
  c.push_back({2,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit&) { return b::maximum(x[0], x[1]); },
               {{"a.maximum(b)", [](Ts t, Ss) { return t[0].maximum(t[1]); }},
                {"lt::maximum(a, b)", [](Ts t, Ss) { return lt::maximum(t[0], t[1]); }}},
               {{"a.maximum_(b)", [](Tensor& a, Ts t, Ss) { a.maximum_(t[1]); }}}});
  c.push_back({2,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit&) { return b::minimum(x[0], x[1]); },
               {{"a.minimum(b)", [](Ts t, Ss) { return t[0].minimum(t[1]); }},
                {"lt::minimum(a, b)", [](Ts t, Ss) { return lt::minimum(t[0], t[1]); }}},
               {{"a.minimum_(b)", [](Tensor& a, Ts t, Ss) { a.minimum_(t[1]); }}}});
  c.push_back({2,
               Draw::weight,
               any,
               [](Bs x, Ss s, const Unit& u) { return b::lerp(x[0], x[1], b::scalar(s[0], u), u); },
               {{"a.lerp(b, s)", [](Ts t, Ss s) { return t[0].lerp(t[1], s[0]); }}},
               {{"a.lerp_(b, s)", [](Tensor& a, Ts t, Ss s) { a.lerp_(t[1], s[0]); }}}});
  OpCase copy{2,   Draw::none,
              any, [](Bs x, Ss, const Unit&) { return x[1]; },
              {},  {{"a.copy_(b)", [](Tensor& a, Ts t, Ss) { a.copy_(t[1]); }}}};
  copy.self_dtype = true;
  c.push_back(copy);
}

// Ops of three tensors.
inline void add_three_tensor_ops(std::vector<OpCase>& c) {
  c.push_back({3,
               Draw::none,
               any,
               [](Bs x, Ss, const Unit& u) { return b::lerp(x[0], x[1], x[2], u); },
               {{"a.lerp(b, c)", [](Ts t, Ss) { return t[0].lerp(t[1], t[2]); }}},
               {{"a.lerp_(b, c)", [](Tensor& a, Ts t, Ss) { a.lerp_(t[1], t[2]); }}}});
  c.push_back(
      {3,
       Draw::any,
       any,
       [](Bs x, Ss s, const Unit& u) {
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
       [](Bs x, Ss s, const Unit& u) {
         const Bound term =
             b::round(b::div(b::round(b::mul(b::scalar(s[0], u), x[1]), u), x[2]), u);
         return b::round(b::add(x[0], term), u);
       },
       {{"a.addcdiv(b, c, s)", [](Ts t, Ss s) { return t[0].addcdiv(t[1], t[2], s[0]); }}},
       {{"a.addcdiv_(b, c, s)", [](Tensor& a, Ts t, Ss s) { a.addcdiv_(t[1], t[2], s[0]); }}}});
}

}  // namespace op_case_rows

inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = [] {
    std::vector<OpCase> c;
    op_case_rows::add_one_tensor_ops(c);
    op_case_rows::add_scalar_operand_ops(c);
    op_case_rows::add_two_tensor_ops(c);
    op_case_rows::add_three_tensor_ops(c);
    return c;
  }();
  return cases;
}

}  // namespace lt_test
