// Helpers and functors shared by the kernel interpreter and by generated kernel source: the
// code generator embeds this file, with op_table.def inlined, at the top of every source it
// compiles, so interpreted and compiled kernels evaluate the same expressions. It includes no
// standard header, to keep each kernel compile short.
#pragma once

namespace lt_kernel {

inline float lt_abs(float x) {
  return __builtin_fabsf(x);
}
inline double lt_abs(double x) {
  return __builtin_fabs(x);
}
inline float lt_sqrt(float x) {
  return __builtin_sqrtf(x);
}
inline double lt_sqrt(double x) {
  return __builtin_sqrt(x);
}
inline float lt_exp(float x) {
  return __builtin_expf(x);
}
inline double lt_exp(double x) {
  return __builtin_exp(x);
}
inline float lt_log(float x) {
  return __builtin_logf(x);
}
inline double lt_log(double x) {
  return __builtin_log(x);
}
inline float lt_tanh(float x) {
  return __builtin_tanhf(x);
}
inline double lt_tanh(double x) {
  return __builtin_tanh(x);
}
inline float lt_pow(float x, float y) {
  return __builtin_powf(x, y);
}
inline double lt_pow(double x, double y) {
  return __builtin_pow(x, y);
}
// NaN-propagating, as torch.maximum / torch.minimum; a + b is NaN when either is.
template <class T>
inline T lt_maximum(T a, T b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
template <class T>
inline T lt_minimum(T a, T b) {
  return (a != a || b != b) ? a + b : (a < b ? a : b);
}

#define LT_UNARY(Name, name, expr, ref) \
  struct Name##Fn {                     \
    template <class T>                  \
    T operator()(T a) const {           \
      return expr;                      \
    }                                   \
  };
#define LT_BINARY(Name, name, expr, ref) \
  struct Name##Fn {                      \
    template <class T>                   \
    T operator()(T a, T b) const {       \
      return expr;                       \
    }                                    \
  };
#define LT_TERNARY(Name, name, expr, ref) \
  struct Name##Fn {                       \
    template <class T>                    \
    T operator()(T a, T b, T c) const {   \
      return expr;                        \
    }                                     \
  };
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY

}  // namespace lt_kernel
