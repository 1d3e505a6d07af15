// What the elementwise ops that every backend must reproduce bit for bit compute: the dtype
// conversions (bf16 and f16 rounding, casts to integers), the random streams (Philox, the
// stochastic rounding and Bernoulli draws built on it) and the 8-bit quantization maps. The
// reference evaluator and the host's element conversions (dtype_traits.h) use the same
// definitions, and the CPU backend embeds this file in every kernel it generates. It includes
// no standard header, to keep each kernel compile short.
#pragma once

namespace lt_kernel {
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator, so element i of draw `offset` under `seed` is a pure function of
// the three, computed where it is used, in any order, on any thread. The counter is
// (position, offset) and the key the seed, each as two 32-bit words.
struct LtPhilox {
  unsigned int c[4];
};
inline LtPhilox lt_philox4x32_10(unsigned int c0, unsigned int c1, unsigned int c2, unsigned int c3,
                                 unsigned int k0, unsigned int k1) {
  LtPhilox x{{c0, c1, c2, c3}};
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned long long p0 = 0xD2511F53ull * x.c[0];
    const unsigned long long p1 = 0xCD9E8D57ull * x.c[2];
    const unsigned int next[4] = {
        static_cast<unsigned int>(p1 >> 32) ^ x.c[1] ^ k0, static_cast<unsigned int>(p1),
        static_cast<unsigned int>(p0 >> 32) ^ x.c[3] ^ k1, static_cast<unsigned int>(p0)};
    x = LtPhilox{{next[0], next[1], next[2], next[3]}};
  }
  return x;
}
// A double on [0, 1) with 53 random bits. seed, offset and position are integers below 2^53.
template <class T>
inline T lt_philox_uniform(T seed, T offset, T position) {
  const unsigned long long s = static_cast<unsigned long long>(static_cast<double>(seed));
  const unsigned long long o = static_cast<unsigned long long>(static_cast<double>(offset));
  const unsigned long long p = static_cast<unsigned long long>(static_cast<double>(position));
  const LtPhilox r =
      lt_philox4x32_10(static_cast<unsigned int>(p), static_cast<unsigned int>(p >> 32),
                       static_cast<unsigned int>(o), static_cast<unsigned int>(o >> 32),
                       static_cast<unsigned int>(s), static_cast<unsigned int>(s >> 32));
  const unsigned long long bits = (static_cast<unsigned long long>(r.c[0]) << 32 | r.c[1]) >> 11;
  return static_cast<T>(static_cast<double>(bits) * 0x1p-53);
}

// The dynamic tree maps of 8-bit optimizers (Dettmers et al., 2022; bitsandbytes'
// create_dynamic_map with 7 exponent bits): level i = 0..6 holds 10^(i-6) times the midpoints of
// k equal steps from 0.1 to 1 (k = 2^i signed, 2^(i+1) unsigned), so codes are dense where a
// block's normalized values are small and still reach 1e-7; then 0 and 1 (and the negatives,
// signed). 256 sorted values: unsigned, code 0 is 0, 1..254 the levels, 255 is 1; signed, codes
// 0..126 the negatives (largest magnitude first), 127 is 0, 128..254 the levels, 255 is 1.
//
// A value is a lookup by code. A code is the nearest value's: a magnitude's code counts the
// midpoints between neighbouring values (rounded to f32) that lie below it. It is found by the
// magnitude's bits rather than by a search of the table (a binary search is eight dependent
// lookups) or by arithmetic on the levels (six threshold tests, then a bin within the level):
// the exponent and the top 7 mantissa bits pick one of 3,200 buckets (25 binades from 2^-24),
// which the midpoints split at most once each (the finest level's steps of 0.9 / 128 are wider
// than any bucket of its binades). A bucket keeps the code of its lower end and the low bits of
// the midpoint inside it, so a code is one lookup and one integer compare, alike in the
// interpreter and in kernels; in the 8-bit AdamW kernel that took a quantization from 0.67 to
// 0.26 ns an element (Intel Xeon, AVX-512).
struct LtDynamicLevels {
  float values[256];  // the map, by code
};
constexpr double lt_dynamic_scale(int level) {
  double scale = 1;
  for (int e = level; e < 6; ++e) scale /= 10;
  return scale;
}
constexpr double lt_dynamic_value(bool is_unsigned, int level, int j) {
  const int k = (is_unsigned ? 2 : 1) << level;
  return lt_dynamic_scale(level) * (0.1 + 0.9 * (j + 0.5) / k);
}
// The map's values from 0 up (0, the levels, 1): `positive`, and their count.
constexpr int lt_dynamic_positive_values(bool is_unsigned, double* positive) {
  int count = 0;
  positive[count++] = 0.0;
  for (int i = 0; i < 7; ++i) {
    const int k = (is_unsigned ? 2 : 1) << i;
    for (int j = 0; j < k; ++j) positive[count++] = lt_dynamic_value(is_unsigned, i, j);
  }
  positive[count++] = 1.0;
  return count;
}
constexpr LtDynamicLevels lt_make_dynamic_levels(bool is_unsigned) {
  LtDynamicLevels levels{};
  double positive[256] = {};
  const int count = lt_dynamic_positive_values(is_unsigned, positive);
  int n = 0;
  if (!is_unsigned) {
    for (int j = count - 2; j >= 1; --j) levels.values[n++] = static_cast<float>(-positive[j]);
  }
  for (int j = 0; j < count; ++j) levels.values[n++] = static_cast<float>(positive[j]);
  return levels;
}
inline constexpr LtDynamicLevels kLtSignedLevels = lt_make_dynamic_levels(false);
inline constexpr LtDynamicLevels kLtUnsignedLevels = lt_make_dynamic_levels(true);

inline constexpr int kLtBucketMantissaBits = 7, kLtBucketLowestExponent = -24;
inline constexpr int kLtBuckets = 25 << kLtBucketMantissaBits;
inline constexpr int kLtBucketLowBits = 23 - kLtBucketMantissaBits;
// The first bucket's number among all of a positive f32's bits shifted by kLtBucketLowBits.
inline constexpr int kLtFirstBucket = (127 + kLtBucketLowestExponent) << kLtBucketMantissaBits;
// The split of a bucket no midpoint lies in: above every bucket's low bits.
inline constexpr unsigned int kLtNoSplit = 1u << kLtBucketLowBits;
struct LtDynamicBuckets {
  // The code of the bucket's lower end, from 0 (zero) up (signed: the positive side), in the
  // low 8 bits; above them the low bits of the midpoint inside the bucket, or kLtNoSplit.
  unsigned int entry[kLtBuckets];
};
// The bits of a positive normal f32, by arithmetic (a constant expression without bit casts).
constexpr unsigned int lt_positive_f32_bits(float value) {
  double significand = value;
  int exponent = 0;
  while (significand >= 2) significand /= 2, ++exponent;
  while (significand < 1) significand *= 2, --exponent;
  const auto mantissa = static_cast<unsigned int>((significand - 1) * 8388608.0);
  return static_cast<unsigned int>(exponent + 127) << 23 | mantissa;
}
constexpr LtDynamicBuckets lt_make_dynamic_buckets(bool is_unsigned) {
  LtDynamicBuckets buckets{};
  double positive[256] = {};
  const int count = lt_dynamic_positive_values(is_unsigned, positive);
  unsigned int midpoint[256] = {};  // in f32 bits; the last above every f32
  for (int c = 0; c + 1 < count; ++c) {
    midpoint[c] = lt_positive_f32_bits(static_cast<float>((positive[c] + positive[c + 1]) / 2));
  }
  midpoint[count - 1] = 0xffffffffu;
  int code = 0;
  for (int b = 0; b < kLtBuckets; ++b) {
    const unsigned int low = static_cast<unsigned int>(kLtFirstBucket + b) << kLtBucketLowBits;
    while (midpoint[code] < low) ++code;
    const bool split = midpoint[code] < low + kLtNoSplit;
    buckets.entry[b] = static_cast<unsigned int>(code) | (split ? midpoint[code] - low : kLtNoSplit)
                                                             << 8;
  }
  return buckets;
}
template <bool Unsigned>
inline constexpr LtDynamicBuckets kLtDynamicBuckets = lt_make_dynamic_buckets(Unsigned);

// The value of a code (clamped to 0..255 and truncated; NaN reads code 0): a lookup, which
// vectorizes as a gather (twice as fast as computing the value from the levels here).
template <bool Unsigned, class T>
inline T lt_dynamic8_value(T code) {
  const LtDynamicLevels& levels = Unsigned ? kLtUnsignedLevels : kLtSignedLevels;
  const int index = code > T(0) ? (code < T(255) ? static_cast<int>(code) : 255) : 0;
  return static_cast<T>(levels.values[index]);
}
// The nearest code; at a midpoint (to f32), the one nearer 0. Magnitudes below the first
// bucket take its code (0) and above the last its code (1's); a NaN gets code 0: quantized
// state holds no NaN. Written for the vectorizer: integer selects, no branch.
template <bool Unsigned>
inline int lt_dynamic8_code_of(float xf) {
  unsigned int bits;
  __builtin_memcpy(&bits, &xf, 4);
  const unsigned int magnitude = bits & 0x7fffffffu;
  const int bucket = static_cast<int>(magnitude >> kLtBucketLowBits) - kLtFirstBucket;
  const int index = bucket < 0 ? 0 : (bucket < kLtBuckets ? bucket : kLtBuckets - 1);
  const unsigned int entry = kLtDynamicBuckets<Unsigned>.entry[index];
  const int above = (magnitude & (kLtNoSplit - 1)) > (entry >> 8) ? 1 : 0;
  const int positive = static_cast<int>(entry & 0xffu) + above;
  int code;
  if constexpr (Unsigned) {
    // Nothing below 0: negative values take code 0 (the value 0).
    code = xf < 0.0f ? 0 : positive;
  } else {
    // No -1 in the signed map: large negative values take the largest negative level value.
    const int negative = 127 - positive;
    code = xf < 0.0f ? (negative > 0 ? negative : 0) : 127 + positive;
  }
  return xf == xf ? code : 0;
}
// The code as a value of the op's dtype.
template <bool Unsigned, class T>
inline T lt_dynamic8_code(T x) {
  return static_cast<T>(static_cast<float>(lt_dynamic8_code_of<Unsigned>(static_cast<float>(x))));
}

// Conversions between dtypes, in registers. Every dtype is computed in its storage type but
// bf16, which is stored as the upper 16 bits of an f32 and computed in f32 registers that
// always hold bf16 values: each op's result is rounded (to nearest, ties to even), as
// PyTorch rounds every bf16 op's result. An lt_cast_<dtype> converts any register type.
inline float lt_bf16_load(unsigned short bits) {
  const unsigned int widened = static_cast<unsigned int>(bits) << 16;
  float x;
  __builtin_memcpy(&x, &widened, 4);
  return x;
}
// Rounds to nearest, ties to even. A NaN stays a NaN of the same sign: its upper bits with
// the quiet bit set, since rounding could carry a NaN's payload into infinity.
inline unsigned short lt_bf16_store(float x) {
  unsigned int bits;
  __builtin_memcpy(&bits, &x, 4);
  // Both results computed, then one selected: a branch here keeps loops from vectorizing well.
  const bool nan = x != x;
  const unsigned int rounded = bits + 0x7fffu + ((bits >> 16) & 1u), quiet = bits | 0x00400000u;
  return static_cast<unsigned short>((nan ? quiet : rounded) >> 16);
}
// The store of an f32 that is a bf16 value (its lower 16 bits zero): no rounding to do. A NaN
// gets its quiet bit, as lt_bf16_store gives it (a signalling NaN can reach a store through a
// selection, which does not round).
inline unsigned short lt_bf16_store_exact(float x) {
  unsigned int bits;
  __builtin_memcpy(&bits, &x, 4);
  const unsigned int quiet = (bits & 0x7fffffffu) > 0x7f800000u ? 0x40u : 0u;
  return static_cast<unsigned short>((bits >> 16) | quiet);
}
// The store of an f32 that a rounding to bf16 produced: its upper half, a NaN already quiet.
inline unsigned short lt_bf16_store_rounded(float x) {
  unsigned int bits;
  __builtin_memcpy(&bits, &x, 4);
  return static_cast<unsigned short>(bits >> 16);
}
inline float lt_cast_bf16(float x) {
  return lt_bf16_load(lt_bf16_store(x));
}
// Rounding a double to f32 and then to a 16-bit float would round twice (a value just above a
// midpoint can land on it). Rounding to odd on the way to f32 keeps the second rounding exact:
// the truncated f32 with its last bit set whenever anything was cut off.
inline float lt_round_to_odd_f32(double x) {
  float narrow = static_cast<float>(x);
  if (static_cast<double>(narrow) != x && x == x) {
    unsigned int bits;
    __builtin_memcpy(&bits, &narrow, 4);
    if (__builtin_fabs(static_cast<double>(narrow)) > __builtin_fabs(x)) --bits;  // toward zero
    bits |= 1u;
    __builtin_memcpy(&narrow, &bits, 4);
  }
  return narrow;
}
inline float lt_cast_bf16(double x) {
  return lt_cast_bf16(lt_round_to_odd_f32(x));
}
inline float lt_cast_bf16(bool x) {
  return x ? 1.0f : 0.0f;
}
// An integer's magnitude cut to its top 24 bits, with the lowest set if anything was cut off,
// is an f32 that rounds to bf16 as the integer itself would: one rounding, for every value.
template <class I>
inline float lt_cast_bf16(I x) {
  unsigned long long magnitude =
      x < 0 ? 0ull - static_cast<unsigned long long>(x) : static_cast<unsigned long long>(x);
  float scale = 1.0f;
  if (magnitude >= (1ull << 24)) {
    const int cut = 40 - __builtin_clzll(magnitude);  // bits below the top 24
    const bool inexact = (magnitude & ((1ull << cut) - 1)) != 0;
    magnitude = (magnitude >> cut) | static_cast<unsigned long long>(inexact);
    scale = static_cast<float>(1ull << cut);
  }
  const float kept = static_cast<float>(magnitude) * scale;
  return lt_cast_bf16(x < 0 ? -kept : kept);
}
// f16 (IEEE binary16), stored as its 16 bits and computed in f32 registers that always hold f16
// values, as bf16 is. Converted in software (bit operations that vectorize), so that the
// interpreter, the host and kernels for any CPU agree (the load of a subnormal multiplies an
// f32 subnormal: a process running with denormals flushed to zero reads those as 0).
inline float lt_f16_load(unsigned short h) {
  const unsigned int sign = static_cast<unsigned int>(h & 0x8000u) << 16;
  const unsigned int magnitude = h & 0x7fffu;
  // Exponent and mantissa moved to f32's places and the exponent rebiased by a multiply, which
  // also normalizes subnormals exactly; infinities and NaNs keep all-ones exponents.
  const unsigned int moved = magnitude << 13;
  float scaled;
  __builtin_memcpy(&scaled, &moved, 4);
  scaled *= 0x1p112f;
  unsigned int bits;
  __builtin_memcpy(&bits, &scaled, 4);
  if (magnitude >= 0x7c00u) bits = moved | 0x7f800000u;
  bits |= sign;
  float x;
  __builtin_memcpy(&x, &bits, 4);
  return x;
}
// Rounds to nearest, ties to even (Giesen's float_to_half with round-to-nearest-even):
// overflow gives infinity, a NaN stays a quiet NaN of the same sign.
inline unsigned short lt_f16_store(float x) {
  unsigned int bits;
  __builtin_memcpy(&bits, &x, 4);
  const unsigned int sign = bits & 0x80000000u;
  bits ^= sign;
  unsigned int out;
  if (bits >= 0x47800000u) {  // 2^16 and up: beyond f16's range once rounded
    out = bits > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (bits < 0x38800000u) {  // below 2^-14: an f16 subnormal or zero
    // Adding 0.5 aligns the subnormal's bits at the bottom of the f32's mantissa, rounded to
    // nearest even by the addition itself.
    float magnitude;
    __builtin_memcpy(&magnitude, &bits, 4);
    magnitude += 0.5f;
    unsigned int aligned;
    __builtin_memcpy(&aligned, &magnitude, 4);
    out = aligned - 0x3f000000u;
  } else {
    const unsigned int odd = (bits >> 13) & 1u;
    bits += 0xc8000fffu + odd;  // rebias the exponent by -112 (mod 2^32) and round
    out = bits >> 13;
  }
  return static_cast<unsigned short>(out | (sign >> 16));
}
// The store of an f32 that holds an f16 value: no rounding, NaNs quieted.
inline unsigned short lt_f16_store_exact(float x) {
  return lt_f16_store(x);
}
inline float lt_cast_f16(float x) {
  return lt_f16_load(lt_f16_store(x));
}
inline float lt_cast_f16(double x) {
  return lt_cast_f16(lt_round_to_odd_f32(x));
}
inline float lt_cast_f16(bool x) {
  return x ? 1.0f : 0.0f;
}
// Integers below 2^24 are exact in f32; larger ones round to infinity in f16 whatever f32 made
// of them.
template <class I>
inline float lt_cast_f16(I x) {
  return lt_cast_f16(static_cast<float>(x));
}

// Stochastic rounding to bf16 (the optimizer's low-precision state: a bf16 weight updated by
// steps below half its ulp would never move under rounding to nearest). The f32's lower 16
// bits plus 16 random bits carry into the kept bits with probability (lower bits) / 2^16, so
// the rounded value's expectation is the f32. The random bits are a pure function of the
// draw's key and the element's position (a counter-based generator, so any thread computes any
// element, in any order), from one round of a 32-bit integer hash (Wellons' lowbias32) rather
// than Philox: Philox's ten 64-bit rounds cost more than the rest of an optimizer step. The
// position is taken modulo 2^32 (a pattern repeats every 4 billion elements of one tensor).
inline unsigned int lt_hash32(unsigned int x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
// 32 random bits for `position` (an element's index modulo 2^32: kernels count it in 32 bits,
// which keeps their loops in 32-bit lanes) under `key`, an integer below 2^53 held in a double.
inline unsigned int lt_random_bits(double key, unsigned int position) {
  const unsigned long long k = static_cast<unsigned long long>(key);
  return lt_hash32((position ^ static_cast<unsigned int>(k)) + static_cast<unsigned int>(k >> 32));
}
// `half` picks the hash's upper (0) or lower (1) 16 bits, so that two roundings of one element
// under one key (an optimizer's weight and second moment) hash once and stay independent. A
// double is rounded to f32 first (to nearest): the one rounding that is not stochastic.
template <class T>
inline float lt_round_bf16_stochastic(T x, double key, unsigned int position, int half) {
  const float f = static_cast<float>(x);
  unsigned int bits;
  __builtin_memcpy(&bits, &f, 4);
  // A NaN keeps its sign and upper payload and gets its quiet bit (as lt_bf16_store gives it),
  // in place of the random bits: a select of what to combine, not a second rounding path.
  const bool nan = f != f;
  const unsigned int random = lt_random_bits(key, position);
  const unsigned int add = nan ? 0x00400000u : (half ? random & 0xffffu : random >> 16);
  bits = (nan ? bits | add : bits + add) & 0xffff0000u;
  float rounded;
  __builtin_memcpy(&rounded, &bits, 4);
  return rounded;
}
// A Bernoulli draw (dropout's keep mask): 1 where the upper 24 of 32 random bits fall below
// probability * 2^24, so the probability is honoured to 2^-24. The bits are two rounds of the
// hash, the key's upper word added between them: one round of lowbias32 over (position ^ key)
// leaves draws under keys that differ only in their upper word related. 32-bit integer work
// that vectorizes, where Philox's 64-bit products over a double position (rand()'s generator)
// cost more than the rest of attention's softmax.
template <class T>
inline T lt_bernoulli(double key, double probability, unsigned int position) {
  const unsigned long long k = static_cast<unsigned long long>(key);
  const unsigned int bits = lt_hash32(lt_hash32(position ^ static_cast<unsigned int>(k)) +
                                      static_cast<unsigned int>(k >> 32));
  const unsigned int threshold =
      probability >= 1 ? 0x1000000u
                       : (probability > 0 ? static_cast<unsigned int>(probability * 0x1p24) : 0u);
  return (bits >> 8) < threshold ? T(1) : T(0);
}
// Floating to integer truncates toward zero, as PyTorch does. NaN and values out of the
// integer's range, which C++ leaves undefined, give its minimum, as x86's conversion
// instructions (and so PyTorch on x86) do. Integers wrap, bool gives 0 or 1.
template <class T>
inline int lt_cast_i32(T x) {
  return static_cast<int>(x);
}
inline int lt_cast_i32(float x) {
  return x >= -0x1p31f && x < 0x1p31f ? static_cast<int>(x) : -2147483647 - 1;
}
inline int lt_cast_i32(double x) {
  return x >= -0x1p31 && x < 0x1p31 ? static_cast<int>(x) : -2147483647 - 1;
}
template <class T>
inline long long lt_cast_i64(T x) {
  return static_cast<long long>(x);
}
inline long long lt_cast_i64(float x) {
  return x >= -0x1p63f && x < 0x1p63f ? static_cast<long long>(x) : -9223372036854775807LL - 1;
}
inline long long lt_cast_i64(double x) {
  return x >= -0x1p63 && x < 0x1p63 ? static_cast<long long>(x) : -9223372036854775807LL - 1;
}

// To u8: floating values truncate toward zero as for i64 and then wrap, as integers do (NaN and
// out-of-range values give 0, i64's minimum wrapped); bool gives 0 or 1.
template <class T>
inline unsigned char lt_cast_u8(T x) {
  return static_cast<unsigned char>(static_cast<unsigned long long>(lt_cast_i64(x)));
}
// An f32 at or beyond 2^31 in magnitude is a multiple of 2^8, so its low byte is 0 whether it
// goes through i64 or i32 (NaN too: both give their minimum): through i32, it converts 16 lanes
// per instruction instead of 8 (an 8-bit optimizer's codes are such casts).
inline unsigned char lt_cast_u8(float x) {
  return static_cast<unsigned char>(lt_cast_i32(x));
}
inline unsigned char lt_cast_u8(bool x) {
  return x ? 1 : 0;
}

// Integer arithmetic. Signed integers wrap on overflow, as PyTorch's do on every CPU (kernels
// are compiled with -fwrapv; the helpers below go through unsigned arithmetic, which wraps by
// definition). A kernel cannot raise PyTorch's ZeroDivisionError, so integer division by zero
// is defined instead: a // 0 is 0 and a % 0 is a, which keeps a == (a // b) * b + a % b.
template <class T>
struct LtIsFloating {
  static constexpr bool value = false;
};
template <>
struct LtIsFloating<float> {
  static constexpr bool value = true;
};
template <>
struct LtIsFloating<double> {
  static constexpr bool value = true;
};
template <class T>
inline T lt_wrapping_neg(T a) {
  return static_cast<T>(0ull - static_cast<unsigned long long>(a));
}
template <class T>
inline T lt_fmod(T a, T b) {
  if constexpr (sizeof(T) == 4) {
    return __builtin_fmodf(a, b);
  } else {
    return __builtin_fmod(a, b);
  }
}
// Python's a // b, as torch.floor_divide: the quotient rounded toward -infinity. Floating
// values as PyTorch's div_floor computes them, from fmod, so that a // b is exact where a / b
// rounds to a whole number (7.0 // 0.1 is 69, not 70); a // 0.0 is a / 0.0.
template <class T>
inline T lt_floor_divide(T a, T b) {
  if constexpr (LtIsFloating<T>::value) {
    if (b == T(0)) return a / b;
    const T mod = lt_fmod(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
    if (div == T(0)) return __builtin_copysign(T(0), a / b);
    T whole = sizeof(T) == 4 ? __builtin_floorf(div) : __builtin_floor(div);
    if (div - whole > T(0.5)) whole += T(1);
    return whole;
  } else {
    if (b == T(0)) return T(0);
    if (b == T(-1)) return lt_wrapping_neg(a);  // MIN // -1 wraps to MIN, as MIN * -1
    const T q = a / b;
    return (a % b != T(0) && (a < T(0)) != (b < T(0))) ? T(q - T(1)) : q;
  }
}
// Python's a % b, as torch.remainder: the sign of b's. Floating a % 0.0 is NaN.
template <class T>
inline T lt_remainder(T a, T b) {
  if constexpr (LtIsFloating<T>::value) {
    T mod = lt_fmod(a, b);
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) mod += b;
    return mod;
  } else {
    if (b == T(0)) return a;
    if (b == T(-1)) return T(0);
    const T r = a % b;
    return (r != T(0) && (r < T(0)) != (b < T(0))) ? T(r + b) : r;
  }
}
// An integer to an integer power by squaring, wrapping as repeated products would. A negative
// exponent gives what truncating 1 / a^-b gives (PyTorch refuses one).
template <class T>
inline T lt_integer_pow(T base, T exponent) {
  if (exponent < T(0)) {
    if (base == T(1)) return T(1);
    if (base == T(-1)) return (exponent & T(1)) ? T(-1) : T(1);
    return T(0);
  }
  unsigned long long result = 1, factor = static_cast<unsigned long long>(base);
  for (unsigned long long e = static_cast<unsigned long long>(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= factor;
    factor *= factor;
  }
  return static_cast<T>(result);
}

}  // namespace lt_kernel
