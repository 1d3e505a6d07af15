// Helpers and functors shared by the CPU backend's kernel interpreter and its generated kernel
// source: the code generator embeds this file, with ir/op_semantics.h and ir/op_table.def
// inlined, at the top of every source it compiles, so interpreted and compiled kernels evaluate
// the same expressions. The math here (exp, log, tanh, erf without libm calls) is the CPU's
// own choice of how to compute the op table's rows; what the rows mean is in ir/. It includes
// no standard header, to keep each kernel compile short.
#pragma once

#include "ir/op_semantics.h"

namespace lt_kernel {

inline float lt_abs(float x) {
  return __builtin_fabsf(x);
}
inline double lt_abs(double x) {
  return __builtin_fabs(x);
}
// Integers: |MIN| wraps to MIN, as in PyTorch.
template <class T>
inline T lt_abs(T x) {
  return x < 0 ? lt_wrapping_neg(x) : x;
}
// Generated loops run in blocks of kPrefetchBlock elements and, where the engine asks for it
// (LT_SOFTWARE_PREFETCH: see software_prefetch_helps), before each block ask for the block
// kPrefetchAhead elements further on in every input array. On an Intel Xeon the hardware
// prefetchers alone left a bf16 optimizer kernel, whose seven streams each advance 2 bytes an
// element, waiting on memory for about 40% of its time (1.37 ns an element on one thread
// against 0.81 with these prefetches; of 0.5-8 KiB ahead, 1-2 KiB was best); on a Zen 4 they
// made the optimizer's kernels slower, into L2 or L3 as well as into L1 (software_prefetch_helps
// has the figures).
// Read prefetches: asking for the lines with write intent, for the arrays updated in place,
// measured no faster.
constexpr long kPrefetchBlock = 128;
constexpr long kPrefetchAhead = 4 * kPrefetchBlock;
// The cache lines of elements [first, first + kPrefetchBlock) of `array`, past the end of the
// call's elements too: a reduction's calls, and those of a launch that gathers an input, cover
// 1024 elements of a longer array, and asking for the next call's lines took a sum of squares
// over [30522, 768] from 3.3-3.6 to 2.3-2.5 ms on the Xeon (lines past the end of an array are
// harmless: a prefetch never faults). The lines are counted at compile time, unrolled: GCC
// deletes a loop of prefetches whose count it must compute. The address is computed in
// integers, as it may lie past the array. Without LT_SOFTWARE_PREFETCH it asks for nothing.
template <class T>
inline void lt_prefetch_block(const T* array, long first) {
#if defined(LT_SOFTWARE_PREFETCH)
  const unsigned long address =
      reinterpret_cast<unsigned long>(array) + static_cast<unsigned long>(first) * sizeof(T);
#pragma GCC unroll 64
  for (unsigned long offset = 0; offset < kPrefetchBlock * sizeof(T); offset += 64) {
    __builtin_prefetch(reinterpret_cast<const char*>(address + offset));
  }
#else
  (void)array;
  (void)first;
#endif
}

inline float lt_sqrt(float x) {
  return __builtin_sqrtf(x);
}
inline double lt_sqrt(double x) {
  return __builtin_sqrt(x);
}
// exp and erf in f32 without a libm call, so that loops over them vectorize (libm's expf and
// erff are scalar calls: erff alone took a tenth of a BERT training step). Their polynomials
// are Horner steps of explicit fused multiply-adds: one rounding a step and half the
// instructions (1.3x on exp, 1.4x on erf), and the same bits in the interpreter (libm's fmaf,
// correctly rounded) as in kernels (the instruction), which contractions left to the compiler
// would not give. exp: Cody-Waite reduction by ln 2 and Cephes' degree-6 polynomial, within
// 1.4 ulp; 2^k applied in two halves so that results down to the smallest subnormal come out
// right.
inline float lt_exp(float x) {
  const float clamped = x < -110.0f ? -110.0f : (x > 100.0f ? 100.0f : x);
  const float k = __builtin_rintf(clamped * 1.44269504088896341f);
  const float r = __builtin_fmaf(k, 2.12194440e-4f, __builtin_fmaf(k, -0.693359375f, clamped));
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  const float y = __builtin_fmaf(p, r * r, r) + 1.0f;
  const int ki = static_cast<int>(k);
  const int k1 = ki >> 1;
  const unsigned int b1 = static_cast<unsigned int>(k1 + 127) << 23;
  const unsigned int b2 = static_cast<unsigned int>(ki - k1 + 127) << 23;
  float s1, s2;
  __builtin_memcpy(&s1, &b1, 4);
  __builtin_memcpy(&s2, &b2, 4);
  const float result = y * s1 * s2;
  return x != x ? x : result;
}
inline double lt_exp(double x) {
  return __builtin_exp(x);
}
// log without a libm call, like exp. x = 2^e m with m in [sqrt(1/2), sqrt 2), from the bits
// (subnormals scaled by 2^23 first); log(m) = f - f^2 / 2 + f^3 P(f) with f = m - 1 exact,
// Cephes' degree-8 polynomial; e ln 2 added in two parts as in exp. Within 0.83 ulp over every
// positive float. Special values (negative, zero, infinity, NaN) are selected at the end, so
// the loop has no branch.
inline float lt_log(float x) {
  const bool subnormal = x < 0x1p-126f;
  const float scaled = subnormal ? x * 0x1p23f : x;
  unsigned int bits;
  __builtin_memcpy(&bits, &scaled, 4);
  int e = static_cast<int>((bits >> 23) & 0xffu) - 126 - (subnormal ? 23 : 0);
  bits = (bits & 0x007fffffu) | 0x3f000000u;
  float m;
  __builtin_memcpy(&m, &bits, 4);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = low ? e - 1 : e;
  const float f = low ? (m + m) - 1.0f : m - 1.0f;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = __builtin_fmaf(p, f, -1.1514610310e-1f);
  p = __builtin_fmaf(p, f, 1.1676998740e-1f);
  p = __builtin_fmaf(p, f, -1.2420140846e-1f);
  p = __builtin_fmaf(p, f, 1.4249322787e-1f);
  p = __builtin_fmaf(p, f, -1.6668057665e-1f);
  p = __builtin_fmaf(p, f, 2.0000714765e-1f);
  p = __builtin_fmaf(p, f, -2.4999993993e-1f);
  p = __builtin_fmaf(p, f, 3.3333331174e-1f);
  const float fe = static_cast<float>(e);
  float y = __builtin_fmaf(fe, -2.12194440e-4f, p * f * z);
  y = __builtin_fmaf(z, -0.5f, y);
  const float result = __builtin_fmaf(fe, 0.693359375f, f + y);
  const float special = x < 0.0f ? __builtin_nanf("") : (x == 0.0f ? -__builtin_inff() : x);
  return (x != x || x <= 0.0f || x == __builtin_inff()) ? special : result;
}
inline double lt_log(double x) {
  return __builtin_log(x);
}
// tanh without a libm call, for the same reason as exp (GELU's tanh form, as GPT-2 uses, runs
// it over every activation). Below 0.625 Cephes' odd polynomial, x + x^3 P(x^2); above,
// 1 - 2 / (exp(2|x|) + 1), which exp's overflow to infinity takes to 1. Both branches are
// computed and one selected, and the sign is copied from x so that tanh(-0) is -0.
inline float lt_tanh(float x) {
  const float a = __builtin_fabsf(x);
  const float z = a * a;
  float p = -5.70498872745e-3f;
  p = __builtin_fmaf(p, z, 2.06390887954e-2f);
  p = __builtin_fmaf(p, z, -5.37397155531e-2f);
  p = __builtin_fmaf(p, z, 1.33314422036e-1f);
  p = __builtin_fmaf(p, z, -3.33332819422e-1f);
  const float small = __builtin_fmaf(a, p * z, a);
  const float large = 1.0f - 2.0f / (lt_exp(2.0f * a) + 1.0f);
  const float result = __builtin_copysignf(a < 0.625f ? small : large, x);
  return x != x ? x : result;
}
inline double lt_tanh(double x) {
  return __builtin_tanh(x);
}
// erf in fused multiply-adds and one shared exp, no division: below 0.84375, x + x P(x^2)
// (P degree 5); above, 1 - exp(-x^2) Q(t) with Q (degree 11) in t, |x| mapped from
// [0.84375, 3.9] onto [-1, 1] (and held at 3.9 above it: erf is 1 in f32 from 3.92). Q
// approximates exp(x^2) erfc(x), smooth where erfc itself falls by 10^7. The coefficients are
// fits in double (tools/fit_erf.py), rounded to f32. Within 1.3 ulp (7.4e-8 absolute over every
// float of [-12, 12]). Both branches are computed and one is selected: no branch to stop
// vectorization. `exp_neg_square` is exp(-x^2), which GELU's derivative shares.
inline float lt_erf_sharing_exp(float x, float exp_neg_square) {
  const float a = __builtin_fabsf(x);
  const float z = x * x;
  float p = -6.360117695e-04f;
  p = __builtin_fmaf(p, z, 5.058702547e-03f);
  p = __builtin_fmaf(p, z, -2.680703811e-02f);
  p = __builtin_fmaf(p, z, 1.128282547e-01f);
  p = __builtin_fmaf(p, z, -3.761258125e-01f);
  p = __builtin_fmaf(p, z, 1.283791661e-01f);
  const float small = __builtin_fmaf(x, p, x);
  const float t = __builtin_fmaf(a < 3.9f ? a : 3.9f, 6.543967128e-01f, -1.552147269e+00f);
  float q = -6.367869355e-05f;
  q = __builtin_fmaf(q, t, 1.718312997e-04f);
  q = __builtin_fmaf(q, t, -2.458167728e-04f);
  q = __builtin_fmaf(q, t, 5.688058445e-04f);
  q = __builtin_fmaf(q, t, -1.526414999e-03f);
  q = __builtin_fmaf(q, t, 3.504183143e-03f);
  q = __builtin_fmaf(q, t, -7.650174666e-03f);
  q = __builtin_fmaf(q, t, 1.631449908e-02f);
  q = __builtin_fmaf(q, t, -3.352804482e-02f);
  q = __builtin_fmaf(q, t, 6.602278352e-02f);
  q = __builtin_fmaf(q, t, -1.240128055e-01f);
  q = __builtin_fmaf(q, t, 2.207590044e-01f);
  const float tail = __builtin_fmaf(-exp_neg_square, q, 1.0f);
  const float large = x < 0.0f ? -tail : tail;
  const float result = a < 0.84375f ? small : large;
  return x != x ? x : result;
}
inline float lt_erf(float x) {
  return lt_erf_sharing_exp(x, lt_exp(-(x * x)));
}
inline double lt_erf(double x) {
  return __builtin_erf(x);
}
// sin and cos through libm: correctly rounded over the whole range (rotary position tables
// take angles in the thousands of radians), not vectorized; they run once per position table,
// not over a step's activations.
inline float lt_sin(float x) {
  return __builtin_sinf(x);
}
inline double lt_sin(double x) {
  return __builtin_sin(x);
}
inline float lt_cos(float x) {
  return __builtin_cosf(x);
}
inline double lt_cos(double x) {
  return __builtin_cos(x);
}
// GELU's derivative, d/dx x Phi(x) = Phi(x) + x phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2:
// erf's exp(-u^2) at u = x / sqrt 2 is exp(-x^2 / 2), the density's, so one exp serves both
// where the composed ops take two.
inline float lt_gelu_derivative(float x) {
  const float u = x * 0.707106781186547524f;
  const float e = lt_exp(-(u * u));
  const float cdf = (lt_erf_sharing_exp(u, e) + 1.0f) * 0.5f;
  return __builtin_fmaf(x, e * 0.398942280401432678f, cdf);
}
inline double lt_gelu_derivative(double x) {
  return (__builtin_erf(x * 0.70710678118654752440) + 1.0) * 0.5 +
         x * __builtin_exp(-0.5 * x * x) * 0.39894228040143267794;
}
// The exponents that `x ** 2` and its gradient (2 x^1) bring, exactly and without a libm call:
// the exponent is a kernel argument, so the compiler unswitches the loop on it and the x * x
// copy vectorizes (glibc's powf: 14-25 ns an element on one thread here; the square: 0.2).
// x * x is correctly rounded, which glibc's powf(x, 2) is not for about 1 value in 1400.
inline float lt_pow(float x, float y) {
  return y == 2.0f ? x * x : (y == 1.0f ? x : __builtin_powf(x, y));
}
inline double lt_pow(double x, double y) {
  return __builtin_pow(x, y);
}
template <class T>
inline T lt_pow(T x, T y) {
  return lt_integer_pow(x, y);
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

// softplus(a, beta, threshold), op_table.def's row.
template <class T>
inline T lt_softplus(T a, T b, T c) {
  const T z = a * b, e = lt_exp(z), u = T(1) + e;
  return z > c ? a : (u == T(1) ? e : lt_log(u) * e / (u - T(1))) / b;
}
// The 8-bit maps by name, as every target's prelude spells them.
template <class T>
inline T lt_dequantize_signed8(T code) {
  return lt_dynamic8_value<false>(code);
}
template <class T>
inline T lt_quantize_signed8(T x) {
  return lt_dynamic8_code<false>(x);
}
template <class T>
inline T lt_dequantize_unsigned8(T code) {
  return lt_dynamic8_value<true>(code);
}
template <class T>
inline T lt_quantize_unsigned8(T x) {
  return lt_dynamic8_code<true>(x);
}
// The code stored as u8 (a Cast to u8 of an f32 quantization, as the 8-bit optimizer stores its
// moments): the integer code itself, where the cast of its f32 value would convert it to f32
// and back (the update kernel of an 8-bit AdamW step 0.85 -> 0.78 ns an element, Zen 5).
inline unsigned char lt_quantize_signed8_u8(float x) {
  return static_cast<unsigned char>(lt_dynamic8_code_of<false>(x));
}
inline unsigned char lt_quantize_unsigned8_u8(float x) {
  return static_cast<unsigned char>(lt_dynamic8_code_of<true>(x));
}

// 8-bit codes decoded a block at a time, where the CPU permutes bytes across a register
// (AVX512_VBMI) faster than it gathers (the engine then defines LT_DECODE_BY_PERMUTES: see
// byte_permutes_beat_gathers) and the compiler is GCC (variable __builtin_shuffle): a kernel that
// reads stored codes through a map (the 8-bit optimizer's moments) decodes each block of them
// into an array before its loop (the code generator emits both forms, LT_DECODES_CODES picks
// one). The map's 256 values are four byte planes of four registers each: two permutes of 128
// bytes and a select on the code's top bit give one byte of 64 values, and four more permutes
// interleave the planes into f32s. 0.08 ns a value on one thread of a Zen 5 against 0.25 for the
// gather the loop does otherwise (Zen 5 gathers 16 lanes in about 16 cycles), which took the
// 8-bit AdamW step of BERT-base from 96 to 83 ms there; on an Intel Xeon, whose permutes of two
// registers are three uops and whose gathers are faster, the step took 135-136 ms against 119-121.
// Without VBMI a block decoded by gathers into an array is slower than the gather in the loop
// (AVX-512 0.61 against 0.55 ns an element of that kernel, AVX2 0.78 against 0.64).
#if defined(LT_DECODE_BY_PERMUTES) && defined(__AVX512VBMI__) && defined(__AVX512BW__) && \
    defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define LT_DECODES_CODES 1
typedef unsigned char LtBytes64 __attribute__((vector_size(64)));
typedef signed char LtSignedBytes64 __attribute__((vector_size(64)));
struct alignas(64) LtBytePlanes {
  unsigned char plane[4][256];  // byte b (least significant first) of each code's value
};
constexpr LtBytePlanes lt_make_byte_planes(const LtDynamicLevels& levels) {
  LtBytePlanes planes{};
  for (int code = 0; code < 256; ++code) {
    const unsigned int bits = __builtin_bit_cast(unsigned int, levels.values[code]);
    for (int b = 0; b < 4; ++b) {
      planes.plane[b][code] = static_cast<unsigned char>(bits >> (8 * b));
    }
  }
  return planes;
}
template <bool Unsigned>
inline constexpr LtBytePlanes kLtBytePlanes = lt_make_byte_planes(Unsigned ? kLtUnsignedLevels
                                                                           : kLtSignedLevels);
// values[j] = the map's value of codes[j], j < count: lt_dynamic8_value's, bit for bit.
template <bool Unsigned>
inline void lt_decode_dynamic8(float* values, const unsigned char* codes, long count) {
  LtBytes64 table[4][4];
  __builtin_memcpy(table, kLtBytePlanes<Unsigned>.plane, sizeof table);
  // Bytes 0 and 1 (planes 0 and 1, or 2 and 3) of values 0-31 side by side, then the two pairs
  // of values 0-15 side by side: f32s 0-15. The same 32 further on give the next ones.
  constexpr LtBytes64 kPairs = {0,  64, 1,  65, 2,  66, 3,  67, 4,  68, 5,  69, 6,  70, 7,  71,
                                8,  72, 9,  73, 10, 74, 11, 75, 12, 76, 13, 77, 14, 78, 15, 79,
                                16, 80, 17, 81, 18, 82, 19, 83, 20, 84, 21, 85, 22, 86, 23, 87,
                                24, 88, 25, 89, 26, 90, 27, 91, 28, 92, 29, 93, 30, 94, 31, 95};
  constexpr LtBytes64 kWords = {0,  1,  64, 65, 2,  3,  66, 67, 4,  5,  68, 69, 6,  7,  70, 71,
                                8,  9,  72, 73, 10, 11, 74, 75, 12, 13, 76, 77, 14, 15, 78, 79,
                                16, 17, 80, 81, 18, 19, 82, 83, 20, 21, 84, 85, 22, 23, 86, 87,
                                24, 25, 88, 89, 26, 27, 90, 91, 28, 29, 92, 93, 30, 31, 94, 95};
  for (long first = 0; first < count; first += 64) {
    const long n = count - first < 64 ? count - first : 64;
    LtBytes64 code{};
    if (n == 64) {
      __builtin_memcpy(&code, codes + first, 64);
    } else {
      for (long j = 0; j < n; ++j) code[j] = codes[first + j];
    }
    // A shuffle of two registers reads the code's low 7 bits; the top one picks the pair.
    const LtSignedBytes64 upper = reinterpret_cast<const LtSignedBytes64&>(code) < 0;
    LtBytes64 plane[4];
    for (int b = 0; b < 4; ++b) {
      plane[b] = upper ? __builtin_shuffle(table[b][2], table[b][3], code)
                       : __builtin_shuffle(table[b][0], table[b][1], code);
    }
    const LtBytes64 low01 = __builtin_shuffle(plane[0], plane[1], kPairs);
    const LtBytes64 low23 = __builtin_shuffle(plane[2], plane[3], kPairs);
    const LtBytes64 high01 = __builtin_shuffle(plane[0], plane[1], kPairs + 32);
    const LtBytes64 high23 = __builtin_shuffle(plane[2], plane[3], kPairs + 32);
    const LtBytes64 words[4] = {
        __builtin_shuffle(low01, low23, kWords), __builtin_shuffle(low01, low23, kWords + 32),
        __builtin_shuffle(high01, high23, kWords), __builtin_shuffle(high01, high23, kWords + 32)};
    if (n == 64) {
      __builtin_memcpy(values + first, words, sizeof words);
    } else {
      float all[64];
      __builtin_memcpy(all, words, sizeof words);
      for (long j = 0; j < n; ++j) values[first + j] = all[j];
    }
  }
}
#else
#define LT_DECODES_CODES 0
#endif

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
