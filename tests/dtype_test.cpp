// Storage dtypes: every dtype with kernels can be created (braced lists, vectors, raw host
// bytes, fills), read back in its own layout or converted, cloned, copied and cast to every
// other dtype, by the interpreter and by native code alike, against a reference computed here
// from the exact values (long double holds every i64 and every double exactly). Integer and
// bool tensors refuse arithmetic with an error naming the op and the dtype; bf16 computes in
// f32 and rounds every result to nearest even.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.h"

namespace {

using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt_test::counter;
using lt_test::error_message;
using lt_test::expect_mentions;

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::bf16,    DType::f16,
                             DType::i32, DType::i64, DType::boolean, DType::u8};
constexpr long double kNaN = std::numeric_limits<long double>::quiet_NaN();
constexpr long double kInf = std::numeric_limits<long double>::infinity();
constexpr double kNaN64 = std::numeric_limits<double>::quiet_NaN();
constexpr float kNaN32 = std::numeric_limits<float>::quiet_NaN();

// The obvious call compiles and picks the element type's dtype.
static_assert(std::is_same_v<decltype(lt::from_vector({1.f, 2.f}, {2})), Tensor>);
static_assert(lt::dtype_of<float>() == DType::f32 && lt::dtype_of<double>() == DType::f64 &&
              lt::dtype_of<int32_t>() == DType::i32 && lt::dtype_of<int64_t>() == DType::i64 &&
              lt::dtype_of<long long>() == DType::i64 && lt::dtype_of<bool>() == DType::boolean);

// --- A host reference, independent of the library. ---

// The bits of the bf16 nearest to v (ties to even), from v's exact value.
uint16_t bf16_bits(long double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xffc0 : 0x7fc0;
  long double rounded = v;
  if (std::isfinite(v) && v != 0) {
    int exponent;
    std::frexp(v, &exponent);
    // 8 significant bits; below f32's normal range the spacing stays 2^-133.
    const long double spacing = std::ldexp(1.0L, std::max(exponent, -125) - 8);
    rounded = std::nearbyint(v / spacing) * spacing;
    if (std::fabs(rounded) >= 0x1p128L) rounded = std::copysign(kInf, v);
  }
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(rounded)) >> 16);
}

long double bf16_value(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// The bits of the f16 (IEEE binary16) nearest to v (ties to even), from v's exact value: 11
// significant bits, subnormals spaced 2^-24, past 65504 infinity; a NaN is the quiet NaN.
uint16_t f16_bits(long double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return sign | 0x7e00;
  const long double a = std::fabs(v);
  if (std::isinf(a)) return sign | 0x7c00;
  if (a == 0) return sign;
  int exponent;
  std::frexp(a, &exponent);  // a in [2^(exponent-1), 2^exponent)
  const long double spacing = std::ldexp(1.0L, std::max(exponent, -13) - 11);
  const long double r = std::nearbyint(a / spacing) * spacing;
  if (r > 65504) return sign | 0x7c00;
  if (r < 0x1p-14L) return sign | static_cast<uint16_t>(r / 0x1p-24L);
  std::frexp(r, &exponent);
  const long double fraction = r / std::ldexp(1.0L, exponent - 1) - 1;  // in [0, 1)
  return sign | static_cast<uint16_t>((exponent - 1 + 15) << 10) |
         static_cast<uint16_t>(fraction * 1024);
}

long double f16_value(uint16_t bits) {
  const long double sign = bits & 0x8000 ? -1 : 1;
  const int exponent = (bits >> 10) & 0x1f;
  const int fraction = bits & 0x3ff;
  if (exponent == 0x1f) return fraction ? kNaN : sign * kInf;
  if (exponent == 0) return sign * std::ldexp(static_cast<long double>(fraction), -24);
  return sign * std::ldexp(1 + fraction / 1024.0L, exponent - 15);
}

// Truncation toward zero; NaN and values out of range give the minimum (x86, and so PyTorch).
template <class I>
I truncate(long double v) {
  const long double bound = -static_cast<long double>(std::numeric_limits<I>::min());
  return v >= -bound && v < bound ? static_cast<I>(v) : std::numeric_limits<I>::min();
}

// A tensor's elements as host bytes in its dtype's layout, and their exact values.
struct HostValues {
  DType dtype;
  std::vector<unsigned char> bytes;

  size_t size() const { return bytes.size() / lt::dtype_size(dtype); }
  template <class T>
  T at(size_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  long double value(size_t i) const {
    switch (dtype) {
      case DType::f32:
        return at<float>(i);
      case DType::f64:
        return at<double>(i);
      case DType::bf16:
        return bf16_value(at<uint16_t>(i));
      case DType::f16:
        return f16_value(at<uint16_t>(i));
      case DType::i32:
        return at<int32_t>(i);
      case DType::i64:
        return at<int64_t>(i);
      case DType::boolean:
      case DType::u8:
        return bytes[i];
    }
    ADD_FAILURE() << "no host layout for " << lt::dtype_name(dtype);
    return 0;
  }
  template <class T>
  void push(T v) {
    const auto* p = reinterpret_cast<const unsigned char*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
};

// Element i of `from` converted to dtype `to`, as PyTorch converts it (bf16 rounded once, to
// nearest even), appended to `out`.
void push_converted(const HostValues& from, size_t i, HostValues& out) {
  const long double v = from.value(i);
  const bool integer = !lt::dtype_is_floating(from.dtype);
  switch (out.dtype) {
    case DType::f32:
      out.push(static_cast<float>(v));
      return;
    case DType::f64:
      out.push(static_cast<double>(v));
      return;
    case DType::bf16:
      out.push(bf16_bits(v));
      return;
    case DType::i32:  // integers wrap
      out.push(integer ? static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v)))
                       : truncate<int32_t>(v));
      return;
    case DType::i64:
      out.push(integer ? static_cast<int64_t>(v) : truncate<int64_t>(v));
      return;
    case DType::boolean:
      out.push(static_cast<unsigned char>(v != 0));  // NaN is true
      return;
    case DType::u8:  // wraps, as i32 does
      out.push(static_cast<uint8_t>(integer ? static_cast<int64_t>(v) : truncate<int64_t>(v)));
      return;
    case DType::f16:
      out.push(f16_bits(v));
      return;
  }
  ADD_FAILURE() << "no conversion to " << lt::dtype_name(out.dtype);
}

HostValues converted(const HostValues& from, DType to) {
  HostValues out{to, {}};
  for (size_t i = 0; i < from.size(); ++i) push_converted(from, i, out);
  return out;
}

// Equal element for element: the same bits, or both NaN.
void expect_same(const HostValues& got, const HostValues& want, const HostValues& input) {
  ASSERT_EQ(got.dtype, want.dtype);
  ASSERT_EQ(got.bytes.size(), want.bytes.size());
  const size_t width = lt::dtype_size(got.dtype);
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool both_nan =
        lt::dtype_is_floating(got.dtype) && std::isnan(got.value(i)) && std::isnan(want.value(i));
    if (both_nan || std::memcmp(&got.bytes[i * width], &want.bytes[i * width], width) == 0) {
      continue;
    }
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << bad << " mismatches converting " << lt::dtype_name(input.dtype) << " to "
                     << lt::dtype_name(got.dtype) << "; first at " << first << ": "
                     << static_cast<double>(input.value(first)) << " gave "
                     << static_cast<double>(got.value(first)) << ", want "
                     << static_cast<double>(want.value(first));
}

HostValues read(const Tensor& t) {
  HostValues out{t.dtype(), std::vector<unsigned char>(t.numel() * lt::dtype_size(t.dtype()))};
  t.to_host(out.bytes.data());
  return out;
}

Tensor upload(const HostValues& values) {
  return lt::from_host(values.bytes.data(), {static_cast<int64_t>(values.size())}, values.dtype);
}

// --- Inputs: fresh random values of each dtype with the hard cases among them. ---

class Inputs {
 public:
  explicit Inputs(uint64_t seed) : gen_(seed) {}

  HostValues make(DType dtype, size_t n) {
    HostValues out{dtype, {}};
    for (long double v : special(dtype)) push(out, v);
    while (out.size() < n) push(out, draw(dtype));
    return out;
  }

 private:
  // Values every dtype pair must get right: signs, fractions, ties, bounds, NaN.
  static std::vector<long double> special(DType dtype) {
    switch (dtype) {
      case DType::boolean:
        return {0, 1};
      case DType::u8:
        return {0, 1, 127, 128, 255};
      case DType::i32:
        return {0, 1, -1, 7, -7, 255, 256, -129, 16777217, -16777217, 2147483647, -2147483648.0L};
      case DType::i64:
        return {0, 1, -1, 4294967296.0L + 5, 2147483648.0L, -2147483649.0L,
                // A bf16 midpoint plus one: rounding through f32 or f64 would land on the tie.
                0x1p60L + 0x1p52L + 1, -(0x1p60L + 0x1p52L + 1), 9007199254740993.0L,
                9223372036854775807.0L, -9223372036854775807.0L - 1};
      default:
        break;
    }
    std::vector<long double> v = {
        0.0L, -0.0L, 0.5L, -0.5L, 2.7L, -2.7L, 1.0L, -1.0L, kNaN, -kNaN, kInf, -kInf,
        // bf16 ties and near-ties: to even, up, down.
        1 + 0x1p-8L, 1 + 3 * 0x1p-8L, -(1 + 0x1p-8L), 1 + 0x1p-8L + 0x1p-20L,
        1 + 0x1p-8L - 0x1p-20L,
        // Integer bounds and beyond.
        2147483647.0L, 2147483648.0L, -2147483648.0L, -2147483904.0L, 3e9L, -3e9L, 1e19L, -1e19L,
        0x1p63L, -0x1p63L, 1e30L,
        // f32 and bf16 extremes, subnormals.
        3.4028234663852886e38L, 0x1p-130L, -0x1p-140L, 0x1p-149L,
        // f16 ties, its largest value and overflow, its subnormals.
        1 + 0x1p-11L, 1 + 3 * 0x1p-11L, -(1 + 0x1p-11L + 0x1p-30L), 65504.0L, 65519.0L, 65520.0L,
        -65536.0L, 0x1p-24L, 0x1p-25L, 3 * 0x1p-26L, -0x1p-15L, 6.1e-5L};
    if (dtype == DType::f64) {
      // One rounding, not two: just above a bf16 tie by less than f32 can see.
      v.push_back(1 + 0x1p-8L + 0x1p-30L);
      v.push_back(-(1 + 0x1p-8L + 0x1p-40L));
      v.push_back(1e300L);
      v.push_back(0x1p-1060L);
    }
    return v;
  }

  long double draw(DType dtype) {
    switch (dtype) {
      case DType::boolean:
        return std::uniform_int_distribution<int>(0, 1)(gen_);
      case DType::u8:
        return std::uniform_int_distribution<int>(0, 255)(gen_);
      case DType::i32:
        return std::uniform_int_distribution<int32_t>()(gen_);
      case DType::i64: {
        // Every magnitude, not just huge ones.
        const int bits = std::uniform_int_distribution<int>(1, 63)(gen_);
        const int64_t v = static_cast<int64_t>(gen_() >> (64 - bits));
        return gen_() % 2 ? v : -v;
      }
      default: {
        const double magnitude = std::ldexp(std::uniform_real_distribution<double>(1, 2)(gen_),
                                            std::uniform_int_distribution<int>(-30, 70)(gen_));
        return gen_() % 2 ? magnitude : -magnitude;
      }
    }
  }

  // v as an element of `out`'s dtype (rounded there for the floating ones).
  static void push(HostValues& out, long double v) {
    switch (out.dtype) {
      case DType::f32:
        out.push(static_cast<float>(v));
        return;
      case DType::f64:
        out.push(static_cast<double>(v));
        return;
      case DType::bf16:
        out.push(bf16_bits(v));
        return;
      case DType::i32:
        out.push(static_cast<int32_t>(v));
        return;
      case DType::i64:
        out.push(static_cast<int64_t>(v));
        return;
      case DType::boolean:
        out.push(static_cast<unsigned char>(v != 0));
        return;
      case DType::u8:
        out.push(static_cast<uint8_t>(v));
        return;
      case DType::f16:
        out.push(f16_bits(v));
        return;
    }
  }

  std::mt19937_64 gen_;
};

// Runs each test once with the interpreter and once with native code (compiled before the
// first launch, not tiered, so the native kernels are what runs).
class DtypeTest : public lt_test::EngineTest, public testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    lt::set_kernel_compiler(GetParam());
    lt::set_tiered_compilation(false);
    lt_test::EngineTest::SetUp();
  }
  void TearDown() override {
    if (!HasFailure()) {
      EXPECT_EQ(counter("NativeCompileFailure"), 0) << "a native compile failed";
    }
    lt_test::settle();
    lt::set_tiered_compilation(true);
    lt::set_kernel_compiler("interpreter");
  }
};

INSTANTIATE_TEST_SUITE_P(Compilers, DtypeTest, testing::Values("interpreter", "native"),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// --- Factories. ---

TEST_P(DtypeTest, FromVectorTakesTheElementTypesDtype) {
  const Tensor f = lt::from_vector({1.5f, -2.f}, {2});
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.f}));
  const Tensor d = lt::from_vector({0.1, -1e300}, {2, 1});
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{0.1, -1e300}));
  const Tensor i = lt::from_vector({int32_t{7}, int32_t{-2147483647 - 1}}, {2});
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{7, -2147483647 - 1}));
  const Tensor l = lt::from_vector({int64_t{1} << 62, int64_t{-3}}, {2});
  EXPECT_EQ(l.dtype(), DType::i64);
  EXPECT_EQ(l.to_vector<int64_t>(), (std::vector<int64_t>{int64_t{1} << 62, -3}));
  const Tensor ll = lt::from_vector({9007199254740993LL}, {});
  EXPECT_EQ(ll.dtype(), DType::i64);
  EXPECT_EQ(ll.to_vector<int64_t>(), (std::vector<int64_t>{9007199254740993}));
  const Tensor b = lt::from_vector({true, false, true}, {3});
  EXPECT_EQ(b.dtype(), DType::boolean);
  EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));

  // The vector overloads, for values built at run time: integer ids are i64.
  const Tensor ids = lt::from_vector(std::vector<int64_t>{4, 0, -1}, {3});
  EXPECT_EQ(ids.dtype(), DType::i64);
  EXPECT_EQ(ids.to_vector<int64_t>(), (std::vector<int64_t>{4, 0, -1}));
  const Tensor small = lt::from_vector(std::vector<int32_t>{5, -6}, {1, 2});
  EXPECT_EQ(small.dtype(), DType::i32);
  EXPECT_EQ(small.to_vector<double>(), (std::vector<double>{5, -6}));
}

TEST_P(DtypeTest, FromVectorChecksTheCount) {
  expect_mentions(error_message([] {
                    lt::from_vector({1.f, 2.f, 3.f}, {2});
                  }),
                  {"from_vector", "[2]", "3"});
  expect_mentions(error_message([] {
                    lt::from_vector(std::vector<int64_t>{1, 2}, {3});
                  }),
                  {"from_vector", "[3]", "2"});
  expect_mentions(error_message([] {
                    lt::from_vector(std::vector<int32_t>(5), {2, 2});
                  }),
                  {"from_vector", "[2, 2]", "5"});
  expect_mentions(error_message([] { lt::from_vector({true}, {-1}); }), {"from_vector", "-1"});
}

TEST_P(DtypeTest, HostBytesRoundTripInEveryDtype) {
  Inputs inputs(next_seed());
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const HostValues values = inputs.make(dtype, 300);
    const Tensor t = upload(values);
    EXPECT_EQ(t.dtype(), dtype);
    EXPECT_EQ(read(t).bytes, values.bytes);  // bit for bit, NaN payloads included
    // Through a kernel: clone copies, and the copy reads back the same.
    const Tensor copy = t.clone();
    lt::mark_step();
    expect_same(read(copy), values, values);
    EXPECT_EQ(read(t).bytes, values.bytes);
  }
}

TEST_P(DtypeTest, FromHostMakesBoolsZeroOrOne) {
  const unsigned char bytes[] = {0, 1, 2, 255, 0, 128};
  const Tensor b = lt::from_host(bytes, {6}, DType::boolean);
  EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1, 1, 0, 1}));
  unsigned char back[6];
  b.to_host(back);
  EXPECT_EQ(std::vector<unsigned char>(back, back + 6),
            (std::vector<unsigned char>{0, 1, 1, 1, 0, 1}));
}

TEST_P(DtypeTest, FromHostAndToHostCheckTheirArguments) {
  expect_mentions(error_message([] { lt::from_host(nullptr, {2}, DType::i64); }),
                  {"from_host", "null", "[2]"});
  const float one = 1;
  expect_mentions(error_message([&] { lt::from_host(&one, {1}, static_cast<DType>(42)); }),
                  {"from_host", "unknown"});
  expect_mentions(error_message([&] { lt::from_host(&one, {-1}, DType::f32); }),
                  {"from_host", "[-1]"});
  EXPECT_NO_THROW(lt::from_host(nullptr, {0, 3}, DType::bf16));
  float out;
  expect_mentions(error_message([&] { Tensor().to_host(&out); }), {"to_host", "undefined"});
  expect_mentions(error_message([] { Tensor().to_vector<int64_t>(); }), {"to_vector", "undefined"});
}

// Zero-copy interchange: external memory read in place and never written; host_memory() a
// snapshot that later in-place ops do not touch; the external owner released when done.
TEST_P(DtypeTest, ExternalMemoryIsReadInPlaceAndNeverWritten) {
  std::vector<float> external = values(257);
  const std::vector<float> original = external;
  bool released = false;
  {
    Tensor t = lt::from_external(external.data(), {257}, DType::f32, [&] { released = true; });
    const Tensor::HostMemory view = t.host_memory();
    EXPECT_EQ(view.data, external.data());  // no copy
    t.mul_(2.0);
    lt::mark_step();
    EXPECT_EQ(external, original);  // the update went to a buffer of the engine's
    const Tensor::HostMemory updated = t.host_memory();
    EXPECT_NE(updated.data, external.data());
    const auto* doubled = static_cast<const float*>(updated.data);
    for (size_t i = 0; i < original.size(); ++i) EXPECT_EQ(doubled[i], original[i] * 2);
    t.add_(1.0);  // the snapshot above holds its buffer: this writes elsewhere too
    lt::mark_step();
    for (size_t i = 0; i < original.size(); ++i) EXPECT_EQ(doubled[i], original[i] * 2);
    EXPECT_FALSE(released);
  }
  lt::wait_device_ops();
  EXPECT_TRUE(released);
  expect_mentions(error_message([] { lt::from_external(nullptr, {2}, DType::f32, nullptr); }),
                  {"from_external", "null"});
}

TEST_P(DtypeTest, FillsInEveryDtype) {
  for (DType dtype : kDTypes) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Tensor z = lt::zeros({2, 3}, dtype);
    const Tensor o = lt::ones({4}, dtype);
    const Tensor f = lt::full({3}, -2.75, dtype);
    Tensor g = lt::zeros({2}, dtype);
    g.fill_(3.5);
    Tensor h = lt::ones({2}, dtype);
    h.zero_();
    lt::mark_step();
    EXPECT_EQ(z.dtype(), dtype);
    EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));
    EXPECT_EQ(o.to_vector<double>(), std::vector<double>(4, 1.0));
    // The value as the dtype holds it: truncated for integers (and wrapped for u8), true for
    // bool.
    const double held = dtype == DType::boolean        ? 1.0
                        : dtype == DType::u8           ? 254.0
                        : lt::dtype_is_floating(dtype) ? -2.75
                                                       : -2.0;
    EXPECT_EQ(f.to_vector<double>(), std::vector<double>(3, held));
    const double filled = dtype == DType::boolean ? 1.0 : lt::dtype_is_floating(dtype) ? 3.5 : 3.0;
    EXPECT_EQ(g.to_vector<double>(), std::vector<double>(2, filled));
    EXPECT_EQ(h.to_vector<double>(), std::vector<double>(2, 0.0));
  }
  // A number given to a bf16 op is rounded twice, as PyTorch's fill rounds it: to f32 (the
  // 2^-30 is lost), then to nearest even bf16 (a tie: down).
  const Tensor tie = lt::full({1}, 1 + 0x1p-8 + 0x1p-30, DType::bf16);
  EXPECT_EQ(tie.item(), 1.0);
  const Tensor above = lt::full({1}, 1 + 0x1p-8 + 0x1p-20, DType::bf16);
  EXPECT_EQ(above.item(), 1 + 0x1p-7);
}

// A number given to an op reaches the device in the op's dtype under every scalar policy:
// as a kernel argument, a constant, or uploaded device data (cached or not).
TEST_P(DtypeTest, NumbersTakeTheDtypeUnderEveryScalarPolicy) {
  for (lt::ScalarPolicy policy : {lt::ScalarPolicy::argument, lt::ScalarPolicy::constant,
                                  lt::ScalarPolicy::cached, lt::ScalarPolicy::uncached}) {
    SCOPED_TRACE(lt::scalar_policy_name(policy));
    const lt_test::PolicyScope scope(policy);
    for (DType dtype : kDTypes) {
      SCOPED_TRACE(lt::dtype_name(dtype));
      const Tensor f = lt::full({2}, -5.5, dtype);
      Tensor g = lt::zeros({3}, dtype);
      g.fill_(7.25);
      lt::mark_step();
      const bool floating = lt::dtype_is_floating(dtype);
      EXPECT_EQ(f.to_vector<double>(), std::vector<double>(2, dtype == DType::boolean ? 1
                                                              : dtype == DType::u8    ? 251
                                                              : floating              ? -5.5
                                                                                      : -5));
      EXPECT_EQ(g.to_vector<double>(), std::vector<double>(3, dtype == DType::boolean ? 1
                                                              : floating              ? 7.25
                                                                                      : 7));
    }
    const Tensor scaled = lt::ones({2}, DType::bf16) * 0.3;
    EXPECT_EQ(scaled.to_vector<double>(), std::vector<double>(2, 0.30078125));
  }
}

TEST_P(DtypeTest, RandomFactoriesMakeFloatingDtypesOnly) {
  // The same draws as f64, rounded once.
  for (bool normal : {false, true}) {
    const Tensor narrow =
        normal ? lt::randn({1000}, 7, DType::bf16) : lt::rand({1000}, 7, DType::bf16);
    const Tensor wide = normal ? lt::randn({1000}, 7, DType::f64) : lt::rand({1000}, 7, DType::f64);
    const std::vector<double> got = narrow.to_vector<double>();
    const std::vector<double> exact = wide.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], static_cast<double>(bf16_value(bf16_bits(exact[i])))) << i;
    }
  }
  for (DType dtype : {DType::i32, DType::i64, DType::boolean, DType::u8}) {
    expect_mentions(error_message([&] { lt::rand({2}, 1, dtype); }),
                    {"rand", lt::dtype_name(dtype)});
    expect_mentions(error_message([&] { lt::randn({2}, 1, dtype); }),
                    {"randn", lt::dtype_name(dtype)});
  }
}

// --- Casts. ---

// Every pair of dtypes, on fresh random values with the hard cases among them, in one step:
// casts of one input share kernels, so this also runs several conversions in one program.
TEST_P(DtypeTest, CastsBetweenEveryPairMatchTheHostReference) {
  Inputs inputs(next_seed());
  std::vector<HostValues> sources;
  std::vector<Tensor> tensors;
  for (DType from : kDTypes) {
    sources.push_back(inputs.make(from, 700));
    tensors.push_back(upload(sources.back()));
  }
  std::vector<std::vector<Tensor>> casts(sources.size());
  std::vector<std::vector<Tensor>> chained(sources.size());
  for (size_t s = 0; s < sources.size(); ++s) {
    for (DType to : kDTypes) {
      casts[s].push_back(tensors[s].to(to));
      // The same cast of a value computed in the kernel (a register, not a load).
      chained[s].push_back(tensors[s].clone().to(to));
    }
  }
  lt::mark_step();
  for (size_t s = 0; s < sources.size(); ++s) {
    for (size_t t = 0; t < std::size(kDTypes); ++t) {
      SCOPED_TRACE(std::string(lt::dtype_name(sources[s].dtype)) + " to " +
                   lt::dtype_name(kDTypes[t]));
      const HostValues want = converted(sources[s], kDTypes[t]);
      expect_same(read(casts[s][t]), want, sources[s]);
      expect_same(read(chained[s][t]), want, sources[s]);
    }
  }
}

TEST_P(DtypeTest, CastEdgeCases) {
  const Tensor x = lt::from_vector({2.7, -2.7, 0.5, -0.5, 3e9, -1e19, kNaN64, 1 + 0x1p-8 + 0x1p-30,
                                    1 + 0x1p-8, 1 + 3 * 0x1p-8, 3.4e38, -0.0},
                                   {12});
  const Tensor as_i32 = x.to(DType::i32), as_i64 = x.to(DType::i64);
  const Tensor as_bool = x.to(DType::boolean), as_bf16 = x.to(DType::bf16);
  const Tensor ids = lt::from_vector({int64_t{4294967301}, int64_t{2147483648},
                                      int64_t{(int64_t{1} << 60) + (int64_t{1} << 52) + 1}},
                                     {3});
  const Tensor ids_i32 = ids.to(DType::i32), ids_bf16 = ids.to(DType::bf16);
  lt::mark_step();
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(as_i32.to_vector<int32_t>(),
            (std::vector<int32_t>{2, -2, 0, 0, kMin32, kMin32, kMin32, 1, 1, 1, kMin32, 0}));
  EXPECT_EQ(as_i64.to_vector<int64_t>(),
            (std::vector<int64_t>{2, -2, 0, 0, 3000000000, kMin64, kMin64, 1, 1, 1, kMin64, 0}));
  EXPECT_EQ(as_bool.to_vector<int32_t>(),
            (std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}));
  const std::vector<double> bf = as_bf16.to_vector<double>();
  EXPECT_EQ(bf[0], 2.703125);
  EXPECT_TRUE(std::isnan(bf[6]));
  EXPECT_EQ(bf[7], 1 + 0x1p-7);  // above the tie by 2^-30: up, though f32 sees the tie
  EXPECT_EQ(bf[8], 1.0);         // a tie: to even
  EXPECT_EQ(bf[9], 1 + 0x1p-6);  // a tie: to even, upwards
  EXPECT_TRUE(std::isinf(bf[10]));
  EXPECT_TRUE(std::signbit(bf[11]));
  EXPECT_EQ(ids_i32.to_vector<int32_t>(), (std::vector<int32_t>{5, kMin32, 1}));  // wraps
  EXPECT_EQ(ids_bf16.to_vector<double>()[2], 0x1p60 + 0x1p53);
}

TEST_P(DtypeTest, ToVectorConvertsLikeTo) {
  const Tensor x = lt::from_vector({-1.75f, 0.25f, kNaN32, 5e9f}, {4});
  EXPECT_EQ(x.to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, INT32_MIN, INT32_MIN}));
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, INT64_MIN, 5000000000}));
  const Tensor b = lt::from_vector({true, false}, {2});
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 0}));
  EXPECT_EQ(lt::from_vector({int64_t{-42}}, {}).item(), -42.0);
  EXPECT_EQ(lt::full({}, 0.3, DType::bf16).item(), 0.30078125);
}

TEST_P(DtypeTest, CopyCastsAndBroadcastsIntoEveryDtype) {
  Tensor ints = lt::zeros({2, 3}, DType::i64);
  ints.copy_(lt::from_vector({1.9f, -1.9f, 7.f}, {3}));  // a row, broadcast; truncated
  Tensor floats = lt::zeros({3}, DType::f32);
  floats.copy_(lt::from_vector({int32_t{-5}, int32_t{16777217}, int32_t{3}}, {3}));
  Tensor flags = lt::zeros({3}, DType::boolean);
  flags.copy_(lt::from_vector({0.0, -0.25, kNaN64}, {3}));
  Tensor halves = lt::zeros({2}, DType::bf16);
  halves.copy_(lt::from_vector({int64_t{257}, int64_t{-259}}, {2}));
  lt::mark_step();
  EXPECT_EQ(ints.dtype(), DType::i64);
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 7, 1, -1, 7}));
  EXPECT_EQ(floats.to_vector<double>(), (std::vector<double>{-5, 16777216, 3}));
  EXPECT_EQ(flags.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(halves.to_vector<double>(), (std::vector<double>{256, -260}));
}

TEST_P(DtypeTest, ToTheSameDtypeIsTheSameTensor) {
  for (DType dtype : kDTypes) {
    const Tensor t = lt::zeros({2}, dtype);
    EXPECT_EQ(t.to(dtype).impl(), t.impl());
  }
}

// --- Arithmetic. ---

// Integers compute in their own dtype, as in PyTorch: ops defined on floating values take them
// as f32, sums count in i64, and what PyTorch refuses (means, matrix products, a number that
// an integer op would truncate) names the op and the dtype and changes nothing.
TEST_P(DtypeTest, IntegerArithmeticFollowsPyTorch) {
  const Tensor f = lt::ones({3});
  for (DType dtype : {DType::i32, DType::i64}) {
    const std::string name = lt::dtype_name(dtype);
    SCOPED_TRACE(name);
    Tensor t = lt::arange(1.0, 4.0, 1.0, dtype);
    lt::mark_step();
    EXPECT_EQ(t.add(t).dtype(), dtype);
    EXPECT_EQ((t * 3.0 - 1.0).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
    EXPECT_EQ(t.sum().dtype(), DType::i64);
    EXPECT_EQ(t.sum().item(), 6);
    EXPECT_EQ(t.exp().dtype(), DType::f32);
    EXPECT_EQ((t / 2.0).to_vector<double>(), (std::vector<double>{0.5, 1, 1.5}));
    const std::vector<std::pair<std::string, std::function<void()>>> refused = {
        {"mean", [&] { t.mean({0}); }},
        {"matmul",
         [&] {
           lt::matmul(t.reshape({1, 3}), t.reshape({3, 1}));
         }},
        {"mul", [&] { t.mul(0.5); }},
        {"add_", [&] { t.add_(1.5); }},
        {"lerp_", [&] { t.lerp_(t, 0.5); }},
    };
    for (const auto& [op, run] : refused) expect_mentions(error_message(run), {op, name});
    EXPECT_FALSE(t.is_pending());  // the failed in-place ops left it as it was
    EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
    // With a floating operand the op computes in the floating dtype, as in PyTorch.
    const Tensor mixed = f.add(t);
    EXPECT_EQ(mixed.dtype(), DType::f32);
    EXPECT_EQ(mixed.to_vector<double>(), (std::vector<double>{2, 3, 4}));
    EXPECT_EQ(lt::maximum(f, t).dtype(), DType::f32);
  }
  // bool: add and mul are or and and, a number promotes to i64, sums are i64 counts.
  const Tensor mask = lt::from_vector({true, false, true}, {3});
  const Tensor other = lt::from_vector({true, true, false}, {3});
  EXPECT_EQ((mask + other).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1}));
  EXPECT_EQ((mask * other).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0}));
  EXPECT_EQ((mask + other).dtype(), DType::boolean);
  EXPECT_EQ((mask * 2.0).to_vector<int64_t>(), (std::vector<int64_t>{2, 0, 2}));
  EXPECT_EQ(mask.sum().dtype(), DType::i64);
  EXPECT_EQ(mask.sum().item(), 2);
  EXPECT_EQ(mask.eq(2.0).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  // u8 holds bytes only; bitwise ops have no floating form.
  const Tensor bytes = lt::ones({3}, DType::u8);
  expect_mentions(error_message([&] { bytes.add(bytes); }), {"add", "u8", "arithmetic"});
  expect_mentions(error_message([&] { f.bitwise_and(f); }), {"bitwise_and", "f32"});
}

TEST(DtypePromotion, FollowsPyTorch) {
  struct Case {
    DType a, b, want;
  };
  const Case cases[] = {
      {DType::f32, DType::f64, DType::f64},
      {DType::bf16, DType::f32, DType::f32},
      {DType::bf16, DType::f64, DType::f64},
      {DType::bf16, DType::f16, DType::f32},
      {DType::i64, DType::f32, DType::f32},
      {DType::i32, DType::bf16, DType::bf16},
      {DType::i32, DType::i64, DType::i64},
      {DType::boolean, DType::i32, DType::i32},
      {DType::boolean, DType::i64, DType::i64},
      {DType::boolean, DType::bf16, DType::bf16},
      {DType::boolean, DType::boolean, DType::boolean},
      {DType::i32, DType::i32, DType::i32},
      {DType::u8, DType::boolean, DType::u8},
      {DType::u8, DType::i32, DType::i32},
      {DType::u8, DType::f16, DType::f16},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(lt::promote_types(c.a, c.b), c.want)
        << lt::dtype_name(c.a) << " + " << lt::dtype_name(c.b);
    EXPECT_EQ(lt::promote_types(c.b, c.a), c.want)
        << lt::dtype_name(c.b) << " + " << lt::dtype_name(c.a);
  }
  EXPECT_THROW(lt::promote_types(static_cast<DType>(42), DType::f32), lt::Error);
  EXPECT_THROW(lt::dtype_size(static_cast<DType>(42)), lt::Error);
  EXPECT_STREQ(lt::dtype_name(static_cast<DType>(42)), "unknown");
  EXPECT_TRUE(lt::dtype_has_kernels(DType::f16));
  EXPECT_TRUE(lt::dtype_has_arithmetic(DType::f16));
  EXPECT_TRUE(lt::dtype_has_kernels(DType::boolean));
  EXPECT_TRUE(lt::dtype_has_arithmetic(DType::i64));
  EXPECT_FALSE(lt::dtype_has_arithmetic(DType::boolean));
  EXPECT_TRUE(lt::dtype_has_arithmetic(DType::bf16));
}

// bf16 ops compute in f32 and round each result to bf16, as PyTorch does. The reference
// rounds the exact result once; f32's own rounding first can move a result by one bf16 ulp.
TEST_P(DtypeTest, Bf16ArithmeticRoundsEveryResult) {
  const int64_t n = 777;
  Inputs inputs(next_seed());
  std::vector<float> xs = values(n, -4, 4), ys = values(n, 0.25, 4);
  std::vector<uint16_t> xb, yb;
  for (int64_t i = 0; i < n; ++i) {
    xb.push_back(bf16_bits(xs[i]));
    yb.push_back(bf16_bits(ys[i]));
  }
  const Tensor x = lt::from_host(xb.data(), {n}, DType::bf16);
  const Tensor y = lt::from_host(yb.data(), {n}, DType::bf16);
  const double s = scalar(-2, 2);
  struct Case {
    const char* name;
    Tensor got;
    std::function<long double(long double, long double)> f;
  };
  // A number given to a bf16 op is rounded to bf16 (through f32), as PyTorch casts it.
  const long double s_bf16 = bf16_value(bf16_bits(static_cast<float>(s)));
  std::vector<Case> cases = {
      {"add", x + y, [](long double a, long double b) { return a + b; }},
      {"mul", x * y, [](long double a, long double b) { return a * b; }},
      {"div", x / y, [](long double a, long double b) { return a / b; }},
      {"sqrt", y.sqrt(), [](long double, long double b) { return std::sqrt(b); }},
      {"exp", x.exp(), [](long double a, long double) { return std::exp(a); }},
      {"scalar", x * s + 1.0,
       [&](long double a, long double) {
         return bf16_value(bf16_bits(bf16_value(bf16_bits(a * s_bf16)) + 1));
       }},
  };
  const Tensor wide = x.add(lt::from_vector(xs, {n}));  // bf16 + f32 is f32
  const Tensor total = (x * y).sum();
  lt::mark_step();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.got.dtype(), DType::bf16);
    const std::vector<double> got = c.got.to_vector<double>();
    const std::vector<double> reference = lt::reference::evaluate(c.got);
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const long double want = bf16_value(bf16_bits(c.f(bf16_value(xb[i]), bf16_value(yb[i]))));
      // Every result is a bf16 value, within one bf16 ulp (2^-7 relative) of the exact one.
      const bool representable = bf16_value(bf16_bits(got[i])) == got[i];
      if (!representable || std::fabs(got[i] - want) > std::fabs(want) * 0x1p-7 + 1e-30 ||
          std::fabs(got[i] - reference[i]) > std::fabs(want) * 0x1p-7 + 1e-30) {
        if (bad++ == 0) {
          ADD_FAILURE() << "at " << i << ": got " << got[i] << ", want "
                        << static_cast<double>(want) << ", reference " << reference[i];
        }
      }
    }
    EXPECT_EQ(bad, 0u);
  }
  EXPECT_EQ(wide.dtype(), DType::f32);
  const std::vector<float> w = wide.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(w[i], static_cast<float>(bf16_value(xb[i]) + xs[i])) << i;
  }
  EXPECT_EQ(total.dtype(), DType::bf16);
  long double exact = 0;
  for (int64_t i = 0; i < n; ++i)
    exact += bf16_value(bf16_bits(bf16_value(xb[i]) * bf16_value(yb[i])));
  EXPECT_NEAR(total.item(), static_cast<double>(exact), std::fabs(exact) * 0x1p-7 + 1e-6);
}

// f16 computes each op in f32 and rounds its result to f16 (to nearest even), as PyTorch does on
// the CPU; the reference evaluator does the same. Matrix products are refused at trace time.
TEST_P(DtypeTest, F16ArithmeticRoundsEveryResult) {
  const int64_t n = 777;
  std::vector<float> xs = values(n, -4, 4), ys = values(n, 0.25, 4);
  std::vector<uint16_t> xh, yh;
  for (int64_t i = 0; i < n; ++i) {
    xh.push_back(f16_bits(xs[i]));
    yh.push_back(f16_bits(ys[i]));
  }
  const Tensor x = lt::from_host(xh.data(), {n}, DType::f16);
  const Tensor y = lt::from_host(yh.data(), {n}, DType::f16);
  struct Case {
    const char* name;
    Tensor got;
    std::function<long double(long double, long double)> f;
  };
  std::vector<Case> cases = {
      {"add", x + y, [](long double a, long double b) { return a + b; }},
      {"mul", x * y, [](long double a, long double b) { return a * b; }},
      {"div", x / y, [](long double a, long double b) { return a / b; }},
      {"sqrt", y.sqrt(), [](long double, long double b) { return std::sqrt(b); }},
      {"exp", x.exp(), [](long double a, long double) { return std::exp(a); }},
      {"where", lt::where(x.gt(0.0), x, y),
       [](long double a, long double b) { return a > 0 ? a : b; }},
  };
  std::vector<std::vector<double>> references;
  for (const Case& c : cases) references.push_back(lt::reference::evaluate(c.got));
  const Tensor big = x * 30000.0;  // past 65504: infinity
  const Tensor total = (x * y).sum();
  lt::mark_step();
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE(c.name);
    EXPECT_EQ(c.got.dtype(), DType::f16);
    const std::vector<double> got = c.got.to_vector<double>();
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const long double want = f16_value(f16_bits(c.f(f16_value(xh[i]), f16_value(yh[i]))));
      // A value of f16, within one f16 ulp (2^-10 relative) of the exact one: exp's f32 error
      // can move a result across a rounding boundary.
      const bool representable = f16_value(f16_bits(got[i])) == got[i];
      if (!representable || std::fabs(got[i] - want) > std::fabs(want) * 0x1p-10 + 1e-7 ||
          std::fabs(got[i] - references[k][i]) > std::fabs(want) * 0x1p-10 + 1e-7) {
        if (bad++ == 0) {
          ADD_FAILURE() << "at " << i << ": got " << got[i] << ", want "
                        << static_cast<double>(want) << ", reference " << references[k][i];
        }
      }
    }
    EXPECT_EQ(bad, 0u);
  }
  const std::vector<double> b = big.to_vector<double>();
  for (int64_t i = 0; i < n; ++i) {
    const long double exact = f16_value(xh[i]) * 30000.0L;
    if (std::fabs(exact) >= 65520) {
      ASSERT_TRUE(std::isinf(b[i])) << i;
    }
  }
  long double exact = 0;
  for (int64_t i = 0; i < n; ++i) exact += f16_value(f16_bits(f16_value(xh[i]) * f16_value(yh[i])));
  EXPECT_NEAR(total.item(), static_cast<double>(exact), std::fabs(exact) * 0x1p-9 + 1e-3);
  expect_mentions(error_message([&] {
                    (void)lt::matmul(x.reshape({1, n}), y.reshape({n, 1}));
                  }),
                  {"matmul", "f16"});
}

// Stochastic rounding lands on one of the two bf16 values around x, picks the upper one with
// probability (x - lower) / (upper - lower), leaves bf16 values, NaN and infinities as they
// are, draws new bits each call, and computes what the reference evaluator computes.
TEST_P(DtypeTest, StochasticRoundingIsUnbiasedBetweenTheTwoNeighbours) {
  const int64_t n = 5000;
  std::vector<float> xs = values(n, -3, 3);
  xs[0] = 1.0f;
  xs[1] = -0.5f;
  xs[2] = kInf;
  xs[3] = -kInf;
  xs[4] = std::nanf("");
  xs[5] = 0x1.fep127f;  // above the largest bf16: rounds up to infinity or down to the largest
  const Tensor x = lt::from_vector(xs, {n});
  const Tensor rounded = lt::stochastic_round(x);
  const Tensor again = lt::stochastic_round(x);
  EXPECT_EQ(rounded.dtype(), DType::bf16);
  const std::vector<double> reference = lt::reference::evaluate(rounded);
  lt::mark_step();
  const std::vector<double> got = rounded.to_vector<double>();
  const std::vector<double> second = again.to_vector<double>();
  size_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = xs[i];
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(got[i]));
      continue;
    }
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const double down = std::bit_cast<float>(bits & 0xffff0000u);  // toward zero
    const double up =
        bits & 0xffffu ? static_cast<double>(std::bit_cast<float>((bits & 0xffff0000u) + 0x10000u))
                       : down;
    ASSERT_TRUE(got[i] == down || got[i] == up) << i << ": " << v << " became " << got[i];
    ASSERT_EQ(got[i], reference[i]) << i;
    differ += got[i] != second[i];
  }
  EXPECT_EQ(got[0], 1.0);
  EXPECT_EQ(got[1], -0.5);
  EXPECT_EQ(got[2], kInf);
  EXPECT_EQ(got[3], -kInf);
  EXPECT_GT(differ, n / 10u) << "two draws gave (nearly) the same bits";

  // Unbiased: 1 + 3 * 2^-10 lies 3/8 of the way from 1 to the next bf16 (1 + 2^-7).
  const int64_t m = 40000;
  const float between = 1.0f + 3 * 0x1p-10f;
  const Tensor many = lt::stochastic_round(lt::full({m}, between));
  const std::vector<double> r = many.to_vector<double>();
  double ups = 0;
  for (double v : r) {
    ASSERT_TRUE(v == 1.0 || v == 1.0 + 0x1p-7) << v;
    ups += v != 1.0;
  }
  // 3/8 of them up, within 5 standard deviations (0.0024 each).
  EXPECT_NEAR(ups / m, 0.375, 0.012);

  // The same seed gives the same bits (the NaN at 4 aside, which equals nothing).
  xs[4] = 0.1f;
  const Tensor finite = lt::from_vector(xs, {n});
  lt::manual_seed(7);
  const std::vector<double> first = lt::stochastic_round(finite).to_vector<double>();
  lt::manual_seed(7);
  EXPECT_EQ(lt::stochastic_round(finite).to_vector<double>(), first);
  expect_mentions(error_message([&] { (void)lt::stochastic_round(x, DType::f16); }),
                  {"stochastic_round", "f16"});
  const Tensor ids = lt::from_vector(std::vector<int64_t>{1, 2}, {2});
  expect_mentions(error_message([&] { (void)lt::stochastic_round(ids); }),
                  {"stochastic_round", "i64"});
}

}  // namespace
