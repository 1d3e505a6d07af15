// The OpenCL C prelude: the CPU prelude's helpers (backend/cpu/kernels/kernel_prelude.h and
// ir/op_semantics.h, where each is explained) as overloaded C functions, with the same
// arithmetic step for step, so that kernels compute the CPU's bits. Only double-precision
// transcendentals, sin, cos and general powers call the device's math library (the CPU calls
// libm there too).
#include "backend/opencl/opencl_prelude.h"

namespace lt::backend::opencl {

const char* const kPrelude = R"CL(
#define LT_FN static inline __attribute__((overloadable))

/* Integers wrap through unsigned arithmetic. */
LT_FN int lt_wrapping_neg(int a) { return (int)(0u - (uint)a); }
LT_FN long lt_wrapping_neg(long a) { return (long)(0ul - (ulong)a); }

LT_FN float lt_abs(float x) { return fabs(x); }
LT_FN double lt_abs(double x) { return fabs(x); }
LT_FN int lt_abs(int x) { return x < 0 ? lt_wrapping_neg(x) : x; }
LT_FN long lt_abs(long x) { return x < 0 ? lt_wrapping_neg(x) : x; }
LT_FN float lt_sqrt(float x) { return sqrt(x); }
LT_FN double lt_sqrt(double x) { return sqrt(x); }

LT_FN float lt_exp(float x) {
  const float clamped = x < -110.0f ? -110.0f : (x > 100.0f ? 100.0f : x);
  const float k = rint(clamped * 1.44269504088896341f);
  const float r = fma(k, 2.12194440e-4f, fma(k, -0.693359375f, clamped));
  float p = 1.9875691500e-4f;
  p = fma(p, r, 1.3981999507e-3f);
  p = fma(p, r, 8.3334519073e-3f);
  p = fma(p, r, 4.1665795894e-2f);
  p = fma(p, r, 1.6666665459e-1f);
  p = fma(p, r, 5.0000001201e-1f);
  const float y = fma(p, r * r, r) + 1.0f;
  const int ki = (int)k;
  const int k1 = ki >> 1;
  const float s1 = as_float((uint)(k1 + 127) << 23);
  const float s2 = as_float((uint)(ki - k1 + 127) << 23);
  const float result = y * s1 * s2;
  return x != x ? x : result;
}
LT_FN double lt_exp(double x) { return exp(x); }

LT_FN float lt_log(float x) {
  const bool subnormal = x < 0x1p-126f;
  const float scaled = subnormal ? x * 0x1p23f : x;
  uint bits = as_uint(scaled);
  int e = (int)((bits >> 23) & 0xffu) - 126 - (subnormal ? 23 : 0);
  bits = (bits & 0x007fffffu) | 0x3f000000u;
  const float m = as_float(bits);
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1 : e;
  const float f = low ? (m + m) - 1.0f : m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = fma(p, f, -1.1514610310e-1f);
  p = fma(p, f, 1.1676998740e-1f);
  p = fma(p, f, -1.2420140846e-1f);
  p = fma(p, f, 1.4249322787e-1f);
  p = fma(p, f, -1.6668057665e-1f);
  p = fma(p, f, 2.0000714765e-1f);
  p = fma(p, f, -2.4999993993e-1f);
  p = fma(p, f, 3.3333331174e-1f);
  const float fe = (float)e;
  float y = fma(fe, -2.12194440e-4f, p * f * z);
  y = fma(z, -0.5f, y);
  const float result = fma(fe, 0.693359375f, f + y);
  const float special = x < 0.0f ? as_float(0x7fc00000u) : (x == 0.0f ? -INFINITY : x);
  return (x != x || x <= 0.0f || x == INFINITY) ? special : result;
}
LT_FN double lt_log(double x) { return log(x); }

LT_FN float lt_tanh(float x) {
  const float a = fabs(x);
  const float z = a * a;
  float p = -5.70498872745e-3f;
  p = fma(p, z, 2.06390887954e-2f);
  p = fma(p, z, -5.37397155531e-2f);
  p = fma(p, z, 1.33314422036e-1f);
  p = fma(p, z, -3.33332819422e-1f);
  const float small = fma(a, p * z, a);
  const float large = 1.0f - 2.0f / (lt_exp(2.0f * a) + 1.0f);
  const float result = copysign(a < 0.625f ? small : large, x);
  return x != x ? x : result;
}
LT_FN double lt_tanh(double x) { return tanh(x); }

static inline float lt_erf_sharing_exp(float x, float exp_neg_square) {
  const float a = fabs(x);
  const float z = x * x;
  float p = -6.360117695e-04f;
  p = fma(p, z, 5.058702547e-03f);
  p = fma(p, z, -2.680703811e-02f);
  p = fma(p, z, 1.128282547e-01f);
  p = fma(p, z, -3.761258125e-01f);
  p = fma(p, z, 1.283791661e-01f);
  const float small = fma(x, p, x);
  const float t = fma(a < 3.9f ? a : 3.9f, 6.543967128e-01f, -1.552147269e+00f);
  float q = -6.367869355e-05f;
  q = fma(q, t, 1.718312997e-04f);
  q = fma(q, t, -2.458167728e-04f);
  q = fma(q, t, 5.688058445e-04f);
  q = fma(q, t, -1.526414999e-03f);
  q = fma(q, t, 3.504183143e-03f);
  q = fma(q, t, -7.650174666e-03f);
  q = fma(q, t, 1.631449908e-02f);
  q = fma(q, t, -3.352804482e-02f);
  q = fma(q, t, 6.602278352e-02f);
  q = fma(q, t, -1.240128055e-01f);
  q = fma(q, t, 2.207590044e-01f);
  const float tail = fma(-exp_neg_square, q, 1.0f);
  const float large = x < 0.0f ? -tail : tail;
  const float result = a < 0.84375f ? small : large;
  return x != x ? x : result;
}
LT_FN float lt_erf(float x) { return lt_erf_sharing_exp(x, lt_exp(-(x * x))); }
LT_FN double lt_erf(double x) { return erf(x); }
LT_FN float lt_sin(float x) { return sin(x); }
LT_FN double lt_sin(double x) { return sin(x); }
LT_FN float lt_cos(float x) { return cos(x); }
LT_FN double lt_cos(double x) { return cos(x); }

LT_FN float lt_gelu_derivative(float x) {
  const float u = x * 0.707106781186547524f;
  const float e = lt_exp(-(u * u));
  const float cdf = (lt_erf_sharing_exp(u, e) + 1.0f) * 0.5f;
  return fma(x, e * 0.398942280401432678f, cdf);
}
LT_FN double lt_gelu_derivative(double x) {
  return (erf(x * 0.70710678118654752440) + 1.0) * 0.5 +
         x * exp(-0.5 * x * x) * 0.39894228040143267794;
}

LT_FN int lt_integer_pow(int base, int exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  ulong result = 1, factor = (ulong)(long)base;
  for (ulong e = (ulong)exponent; e != 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return (int)result;
}
LT_FN long lt_integer_pow(long base, long exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  ulong result = 1, factor = (ulong)base;
  for (ulong e = (ulong)exponent; e != 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return (long)result;
}
LT_FN float lt_pow(float x, float y) { return y == 2.0f ? x * x : (y == 1.0f ? x : pow(x, y)); }
LT_FN double lt_pow(double x, double y) { return pow(x, y); }
LT_FN int lt_pow(int x, int y) { return lt_integer_pow(x, y); }
LT_FN long lt_pow(long x, long y) { return lt_integer_pow(x, y); }

#define LT_MIN_MAX(T)                                                                     \
  LT_FN T lt_maximum(T a, T b) { return (a != a || b != b) ? a + b : (a > b ? a : b); } \
  LT_FN T lt_minimum(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? a : b); }
LT_MIN_MAX(float)
LT_MIN_MAX(double)
LT_MIN_MAX(int)
LT_MIN_MAX(long)
LT_MIN_MAX(uchar)
LT_MIN_MAX(bool)
#undef LT_MIN_MAX

LT_FN float lt_softplus(float a, float b, float c) {
  const float z = a * b, e = lt_exp(z), u = 1.0f + e;
  return z > c ? a : (u == 1.0f ? e : lt_log(u) * e / (u - 1.0f)) / b;
}
LT_FN double lt_softplus(double a, double b, double c) {
  const double z = a * b, e = lt_exp(z), u = 1.0 + e;
  return z > c ? a : (u == 1.0 ? e : lt_log(u) * e / (u - 1.0)) / b;
}

/* Python's // and %, as torch.floor_divide and torch.remainder. */
#define LT_FLOOR_DIVIDE_FLOATING(T)                                 \
  LT_FN T lt_floor_divide(T a, T b) {                               \
    if (b == (T)0) return a / b;                                    \
    const T mod = fmod(a, b);                                       \
    T div = (a - mod) / b;                                          \
    if (mod != (T)0 && (b < (T)0) != (mod < (T)0)) div -= (T)1;     \
    if (div == (T)0) return copysign((T)0, a / b);                  \
    T whole = floor(div);                                           \
    if (div - whole > (T)0.5) whole += (T)1;                        \
    return whole;                                                   \
  }                                                                 \
  LT_FN T lt_remainder(T a, T b) {                                  \
    T mod = fmod(a, b);                                             \
    if (mod != (T)0 && (b < (T)0) != (mod < (T)0)) mod += b;        \
    return mod;                                                     \
  }
LT_FLOOR_DIVIDE_FLOATING(float)
LT_FLOOR_DIVIDE_FLOATING(double)
#undef LT_FLOOR_DIVIDE_FLOATING
#define LT_FLOOR_DIVIDE_INTEGER(T)                                                  \
  LT_FN T lt_floor_divide(T a, T b) {                                               \
    if (b == 0) return 0;                                                           \
    if (b == -1) return lt_wrapping_neg(a);                                         \
    const T q = a / b;                                                              \
    return (a % b != 0 && (a < 0) != (b < 0)) ? (T)(q - 1) : q;                     \
  }                                                                                 \
  LT_FN T lt_remainder(T a, T b) {                                                  \
    if (b == 0) return a;                                                           \
    if (b == -1) return 0;                                                          \
    const T r = a % b;                                                              \
    return (r != 0 && (r < 0) != (b < 0)) ? (T)(r + b) : r;                         \
  }
LT_FLOOR_DIVIDE_INTEGER(int)
LT_FLOOR_DIVIDE_INTEGER(long)
#undef LT_FLOOR_DIVIDE_INTEGER

/* Philox4x32-10. */
typedef struct { uint c[4]; } LtPhilox;
static inline LtPhilox lt_philox4x32_10(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1) {
  LtPhilox x = {{c0, c1, c2, c3}};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const ulong p0 = 0xD2511F53ul * x.c[0];
    const ulong p1 = 0xCD9E8D57ul * x.c[2];
    const uint n0 = (uint)(p1 >> 32) ^ x.c[1] ^ k0, n1 = (uint)p1;
    const uint n2 = (uint)(p0 >> 32) ^ x.c[3] ^ k1, n3 = (uint)p0;
    x.c[0] = n0;
    x.c[1] = n1;
    x.c[2] = n2;
    x.c[3] = n3;
  }
  return x;
}
static inline double lt_philox_uniform_double(double seed, double offset, double position) {
  const ulong s = (ulong)seed, o = (ulong)offset, p = (ulong)position;
  const LtPhilox r = lt_philox4x32_10((uint)p, (uint)(p >> 32), (uint)o, (uint)(o >> 32),
                                      (uint)s, (uint)(s >> 32));
  const ulong bits = ((ulong)r.c[0] << 32 | r.c[1]) >> 11;
  return (double)bits * 0x1p-53;
}
LT_FN double lt_philox_uniform(double seed, double offset, double position) {
  return lt_philox_uniform_double(seed, offset, position);
}
LT_FN float lt_philox_uniform(float seed, float offset, float position) {
  return (float)lt_philox_uniform_double((double)seed, (double)offset, (double)position);
}

/* bf16 and f16, stored as 16 bits and computed in f32. */
static inline float lt_bf16_load(ushort bits) { return as_float((uint)bits << 16); }
static inline ushort lt_bf16_store(float x) {
  const uint bits = as_uint(x);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint rounded = bits + 0x7fffu + ((bits >> 16) & 1u), quiet = bits | 0x00400000u;
  return (ushort)((nan ? quiet : rounded) >> 16);
}
static inline ushort lt_bf16_store_exact(float x) {
  const uint bits = as_uint(x);
  const uint quiet = (bits & 0x7fffffffu) > 0x7f800000u ? 0x40u : 0u;
  return (ushort)((bits >> 16) | quiet);
}
static inline ushort lt_bf16_store_rounded(float x) { return (ushort)(as_uint(x) >> 16); }
static inline float lt_round_to_odd_f32(double x) {
  float narrow = (float)x;
  if ((double)narrow != x && x == x) {
    uint bits = as_uint(narrow);
    if (fabs((double)narrow) > fabs(x)) --bits;
    bits |= 1u;
    narrow = as_float(bits);
  }
  return narrow;
}
static inline float lt_f16_load(ushort h) {
  const uint sign = (uint)(h & 0x8000u) << 16;
  const uint magnitude = h & 0x7fffu;
  const uint moved = magnitude << 13;
  const float scaled = as_float(moved) * 0x1p112f;
  uint bits = as_uint(scaled);
  if (magnitude >= 0x7c00u) bits = moved | 0x7f800000u;
  bits |= sign;
  return as_float(bits);
}
static inline ushort lt_f16_store(float x) {
  uint bits = as_uint(x);
  const uint sign = bits & 0x80000000u;
  bits ^= sign;
  uint out;
  if (bits >= 0x47800000u) {
    out = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (bits < 0x38800000u) {
    const float magnitude = as_float(bits) + 0.5f;
    out = as_uint(magnitude) - 0x3f000000u;
  } else {
    const uint odd = (bits >> 13) & 1u;
    bits += 0xc8000fffu + odd;
    out = bits >> 13;
  }
  return (ushort)(out | (sign >> 16));
}
static inline ushort lt_f16_store_exact(float x) { return lt_f16_store(x); }

/* An integer's magnitude cut to its top 24 bits, sticky, rounds to bf16 as the integer does. */
static inline float lt_integer_to_bf16_f32(long x) {
  ulong magnitude = x < 0 ? 0ul - (ulong)x : (ulong)x;
  float scale = 1.0f;
  if (magnitude >= (1ul << 24)) {
    const int cut = 40 - (int)clz(magnitude);
    const bool inexact = (magnitude & ((1ul << cut) - 1)) != 0;
    magnitude = (magnitude >> cut) | (ulong)inexact;
    scale = (float)(1ul << cut);
  }
  const float kept = (float)magnitude * scale;
  return x < 0 ? -kept : kept;
}
LT_FN float lt_cast_bf16(float x) { return lt_bf16_load(lt_bf16_store(x)); }
LT_FN float lt_cast_bf16(double x) { return lt_cast_bf16(lt_round_to_odd_f32(x)); }
LT_FN float lt_cast_bf16(bool x) { return x ? 1.0f : 0.0f; }
LT_FN float lt_cast_bf16(int x) { return lt_cast_bf16(lt_integer_to_bf16_f32((long)x)); }
LT_FN float lt_cast_bf16(long x) { return lt_cast_bf16(lt_integer_to_bf16_f32(x)); }
LT_FN float lt_cast_bf16(uchar x) { return lt_cast_bf16(lt_integer_to_bf16_f32((long)x)); }
LT_FN float lt_cast_f16(float x) { return lt_f16_load(lt_f16_store(x)); }
LT_FN float lt_cast_f16(double x) { return lt_cast_f16(lt_round_to_odd_f32(x)); }
LT_FN float lt_cast_f16(bool x) { return x ? 1.0f : 0.0f; }
LT_FN float lt_cast_f16(int x) { return lt_cast_f16((float)x); }
LT_FN float lt_cast_f16(long x) { return lt_cast_f16((float)x); }
LT_FN float lt_cast_f16(uchar x) { return lt_cast_f16((float)x); }

/* Floating to integer truncates; NaN and out-of-range values give the minimum, as x86 does. */
LT_FN int lt_cast_i32(float x) { return x >= -0x1p31f && x < 0x1p31f ? (int)x : INT_MIN; }
LT_FN int lt_cast_i32(double x) { return x >= -0x1p31 && x < 0x1p31 ? (int)x : INT_MIN; }
LT_FN int lt_cast_i32(int x) { return x; }
LT_FN int lt_cast_i32(long x) { return (int)x; }
LT_FN int lt_cast_i32(uchar x) { return (int)x; }
LT_FN int lt_cast_i32(bool x) { return (int)x; }
LT_FN long lt_cast_i64(float x) { return x >= -0x1p63f && x < 0x1p63f ? (long)x : LONG_MIN; }
LT_FN long lt_cast_i64(double x) { return x >= -0x1p63 && x < 0x1p63 ? (long)x : LONG_MIN; }
LT_FN long lt_cast_i64(int x) { return (long)x; }
LT_FN long lt_cast_i64(long x) { return x; }
LT_FN long lt_cast_i64(uchar x) { return (long)x; }
LT_FN long lt_cast_i64(bool x) { return (long)x; }
LT_FN uchar lt_cast_u8(float x) { return (uchar)(ulong)lt_cast_i64(x); }
LT_FN uchar lt_cast_u8(double x) { return (uchar)(ulong)lt_cast_i64(x); }
LT_FN uchar lt_cast_u8(int x) { return (uchar)x; }
LT_FN uchar lt_cast_u8(long x) { return (uchar)x; }
LT_FN uchar lt_cast_u8(uchar x) { return x; }
LT_FN uchar lt_cast_u8(bool x) { return x ? 1 : 0; }

/* Random bits for stochastic rounding and Bernoulli draws: lowbias32. */
static inline uint lt_hash32(uint x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
static inline uint lt_random_bits(double key, uint position) {
  const ulong k = (ulong)key;
  return lt_hash32((position ^ (uint)k) + (uint)(k >> 32));
}
LT_FN float lt_round_bf16_stochastic(float f, double key, uint position, int lower_half) {
  uint bits = as_uint(f);
  const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint random = lt_random_bits(key, position);
  const uint add = nan ? 0x00400000u : (lower_half ? random & 0xffffu : random >> 16);
  bits = (nan ? bits | add : bits + add) & 0xffff0000u;
  return as_float(bits);
}
LT_FN float lt_round_bf16_stochastic(double x, double key, uint position, int lower_half) {
  return lt_round_bf16_stochastic((float)x, key, position, lower_half);
}
static inline int lt_bernoulli(double key, double probability, uint position) {
  const ulong k = (ulong)key;
  const uint bits = lt_hash32(lt_hash32(position ^ (uint)k) + (uint)(k >> 32));
  const uint threshold =
      probability >= 1 ? 0x1000000u : (probability > 0 ? (uint)(probability * 0x1p24) : 0u);
  return (bits >> 8) < threshold ? 1 : 0;
}

/* The 8-bit maps, their tables and bucket constants printed from the CPU's (lt_dynamic8_* in
   ir/op_semantics.h): a code is its magnitude's bucket's lower code, one more above the
   bucket's midpoint. The buckets are printed only for programs that quantize. */
#ifdef LT_BUCKETS
static inline float lt_dynamic8_code(__constant const uint* buckets, bool is_unsigned, float xf) {
  const uint magnitude = as_uint(xf) & 0x7fffffffu;
  const int bucket = (int)(magnitude >> LT_BUCKET_LOW_BITS) - LT_FIRST_BUCKET;
  const int index = bucket < 0 ? 0 : (bucket < LT_BUCKETS ? bucket : LT_BUCKETS - 1);
  const uint entry = buckets[index];
  const int above = (magnitude & (LT_NO_SPLIT - 1u)) > (entry >> 8) ? 1 : 0;
  const int positive = (int)(entry & 0xffu) + above;
  int code;
  if (is_unsigned) {
    code = xf < 0.0f ? 0 : positive;
  } else {
    const int negative = 127 - positive;
    code = xf < 0.0f ? (negative > 0 ? negative : 0) : 127 + positive;
  }
  return xf == xf ? (float)code : 0.0f;
}
#define LT_QUANTIZE8(T)                                                                    \
  LT_FN T lt_quantize_signed8(T x) {                                                       \
    return (T)lt_dynamic8_code(lt_signed_buckets, false, (float)x);                        \
  }                                                                                        \
  LT_FN T lt_quantize_unsigned8(T x) {                                                     \
    return (T)lt_dynamic8_code(lt_unsigned_buckets, true, (float)x);                       \
  }
LT_QUANTIZE8(float)
LT_QUANTIZE8(double)
#undef LT_QUANTIZE8
#endif
#define LT_DEQUANTIZE8(T)                                                                  \
  /* A code's table index, clamped and truncated in the code's own type (NaN reads 0). */  \
  LT_FN int lt_dynamic8_index(T code) {                                                    \
    return code > (T)0 ? (code < (T)255 ? (int)code : 255) : 0;                            \
  }                                                                                        \
  LT_FN T lt_dequantize_signed8(T code) {                                                  \
    return (T)lt_signed_levels.values[lt_dynamic8_index(code)];                            \
  }                                                                                        \
  LT_FN T lt_dequantize_unsigned8(T code) {                                                \
    return (T)lt_unsigned_levels.values[lt_dynamic8_index(code)];                          \
  }
LT_DEQUANTIZE8(float)
LT_DEQUANTIZE8(double)
#undef LT_DEQUANTIZE8
)CL";

}  // namespace lt::backend::opencl
