#pragma once
// The error bounds of random_program.h: every value carries an interval and a forward error
// bound, moved op by op (interval arithmetic plus a rounding term per op).
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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

// How far the result of one op of a dtype may be from the exact value. f64 counts twice: the
// double reference rounds as well. bf16 and f16 compute each op in f32 and round its result to
// the dtype; the reference rounds its (double) result to the dtype too.
struct Unit {
  double reg;    // relative: one rounding in the register type (f32 for bf16 and f16)
  double store;  // relative: the rounding of a register's value to the dtype (0 where they are one)
  double tiny;   // absolute, below the normal range: more than half the subnormals' spacing
  // An op's result: computed in the register type, then stored.
  double op() const { return reg + store * (1 + reg); }
  // The rounding of the register type alone, as within a ternary op (lerp) before its store.
  Unit in_register() const { return {reg, 0, reg * 0x1p-125}; }
};

inline Unit unit(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return {0x1p-52, 0, 0x1p-52 * 0x1p-125};
    case DType::bf16:  // 8 significant bits, f32's exponent range
      return {0x1p-24, 0x1p-8, 0x1p-8 * 0x1p-125};
    case DType::f16:  // 11 significant bits; normal from 2^-14, subnormals spaced 2^-24
      return {0x1p-24, 0x1p-11, 0x1p-11 * 0x1p-13};
    default:
      return {0x1p-24, 0, 0x1p-24 * 0x1p-125};
  }
}

// Whether every value of dtype `from` is one of dtype `to`: a cast from `from` to `to` is exact.
inline bool holds(DType to, DType from) {
  return to == from || to == DType::f64 ||
         (to == DType::f32 && (from == DType::bf16 || from == DType::f16));
}

// The type an op of `dtype` computes in: f32 for bf16 and f16.
inline DType register_dtype(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::f16 ? DType::f32 : dtype;
}

// v rounded to the nearest value of a float dtype, ties to even, as a cast rounds it (to
// infinity past f16's range).
inline double round_to(DType dtype, double v) {
  if (dtype == DType::f32) return static_cast<float>(v);
  if ((dtype != DType::bf16 && dtype != DType::f16) || !std::isfinite(v) || v == 0) return v;
  const bool half = dtype == DType::f16;
  const int digits = half ? 11 : 8, min_exponent = half ? -14 : -126;
  int exponent;
  std::frexp(v, &exponent);  // |v| in [2^(exponent - 1), 2^exponent)
  const double spacing = std::ldexp(1.0, std::max(exponent - 1, min_exponent) - (digits - 1));
  const double rounded = std::nearbyint(v / spacing) * spacing;
  if (std::abs(rounded) > (half ? 65504 : 0x1.fep127)) return std::copysign(INFINITY, v);
  return rounded;
}

// A bf16 or f16 value's bits (v already one of the dtype's values, finite).
inline uint16_t half_bits(DType dtype, double v) {
  if (dtype == DType::bf16) return static_cast<uint16_t>(std::bit_cast<uint32_t>(float(v)) >> 16);
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::abs(v);
  if (a < 0x1p-14) return sign | static_cast<uint16_t>(a * 0x1p24);  // subnormal: k 2^-24
  int exponent;
  const double mantissa = std::frexp(a, &exponent);  // in [0.5, 1)
  return sign | static_cast<uint16_t>((exponent + 14) << 10) |
         static_cast<uint16_t>((2 * mantissa - 1) * 1024);
}

namespace bounds {

// libm's exp, log, tanh and pow are within a few ulps; sigmoid and rsqrt chain two roundings.
constexpr double kTranscendental = 8;

// A scalar as a kernel of the op's dtype sees it: rounded to the dtype (one store's rounding).
inline Bound scalar(double s, const Unit& u) {
  return {s, s, u.op() * std::abs(s)};
}
// Relative to the value, but absolute below the normal range (Unit::tiny).
inline Bound round(Bound x, double relative, double tiny) {
  x.err += relative * x.mag() + tiny;
  return x;
}
inline Bound round(Bound x, const Unit& u) {
  return round(x, u.op(), u.tiny);
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
// A libm function's result: a few units of the register type, then stored.
inline Bound round_libm(Bound x, const Unit& u) {
  const double reg = kTranscendental * u.reg;
  return round(x, reg + u.store * (1 + reg), kTranscendental * u.tiny);
}
// f monotone on the values the engine may hold, with |f'| <= slope there.
inline Bound through(Bound x, double (*f)(double), double slope, const Unit& u) {
  const double a = f(x.lo), b = f(x.hi);
  return round_libm({std::min(a, b), std::max(a, b), slope * x.err}, u);
}
inline Bound pow(Bound x, double e, const Unit& u) {
  std::vector<double> at = {std::pow(x.lo, e), std::pow(x.hi, e)};
  if (x.lo < 0 && x.hi > 0) at.push_back(std::pow(0.0, e));
  // |d/dx x^e| = |e| |x|^(e-1): largest at the largest |x| for e >= 1, else at the smallest.
  const double slope =
      e == 0 ? 0 : std::abs(e) * std::pow(e >= 1 ? x.mag() + x.err : gap(x), e - 1);
  return round_libm({*std::min_element(at.begin(), at.end()),
                     *std::max_element(at.begin(), at.end()), slope * x.err},
                    u);
}
// a + w * (b - a), rounded as the kernel computes it: one op, stored once.
inline Bound lerp(Bound a, Bound b, Bound w, const Unit& u) {
  const Unit in = u.in_register();
  return round(add(a, round(mul(w, round(sub(b, a), in)), in)), u);
}
// Values taken from x or from y, unchanged: a concatenation, a selection.
inline Bound hull(Bound x, Bound y) {
  return {std::min(x.lo, y.lo), std::max(x.hi, y.hi), std::max(x.err, y.err)};
}
// A sum over k products a_i * b_i, as an output of a matrix product. The engine's GEMM
// accumulates in the register type (f32 for bf16), in any order: within gamma_k <= (k + 1) u of
// sum |a_i b_i| (and an absolute half subnormal spacing per product and addition), then stores
// the sum (bf16); the reference accumulates in double (2^-53 each) and rounds the sum to the
// dtype. The operands' own errors add up over the k terms.
inline Bound dot(Bound a, Bound b, int64_t k, const Unit& u) {
  if (k == 0) return {};
  const Bound p = mul(a, b);
  const double n = static_cast<double>(k);
  const double abs_sum = n * (a.mag() + a.err) * (b.mag() + b.err);
  const Bound sum = {
      n * p.lo, n * p.hi,
      n * p.err + ((n + 1) * u.reg + n * 0x1p-53) * abs_sum + 2 * n * u.reg * 0x1p-125};
  return u.store > 0 ? round(sum, u.store, u.tiny) : sum;
}

}  // namespace bounds

}  // namespace lt_test
