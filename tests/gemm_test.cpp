// The GEMM wrapper (src/backend/cpu/gemm.h) against a double-precision triple loop on random
// operands. Padding past each row of A and B holds NaN, so a read outside the matrix shows in
// the result; padding past each row of C holds a sentinel that must survive.
#include "backend/cpu/gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lazytensor/error.h"
#include "lazytensor/runtime.h"

namespace lt::backend::cpu {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kSentinel = 7.0;

double bf16_value(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even; NaN stays NaN.
uint16_t bf16_bits(double x) {
  uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(x));
  if (std::isnan(x)) return 0x7fc0;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Element access for each storage type: bf16 is stored as its bits.
template <class T>
double value(T x) {
  return static_cast<double>(x);
}
template <>
double value(uint16_t x) {
  return bf16_value(x);
}
template <class T>
T element(double x) {
  return static_cast<T>(x);
}
template <>
uint16_t element(double x) {
  return bf16_bits(x);
}

struct Case {
  bool trans_a = false, trans_b = false;  // check_transposes sets both
  int64_t m, n, k;
  int64_t pad;  // extra elements past each row of A, B and C
  double alpha, beta;
};

// The dtypes of one multiply: operands A and B, result C.
struct Types {
  DType operands, result;
};

std::string name(DType dtype) {
  return dtype == DType::f32 ? "f32" : dtype == DType::f64 ? "f64" : "bf16";
}

std::string name(const Types& t) {
  return t.operands == t.result ? name(t.operands) : name(t.operands) + "_" + name(t.result);
}

std::string describe(const Types& types, const Case& c) {
  return name(types) + (c.trans_a ? " A^T" : " A") + (c.trans_b ? " B^T" : " B") +
         " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " pad=" + std::to_string(c.pad) + " alpha=" + std::to_string(c.alpha) +
         " beta=" + std::to_string(c.beta);
}

// A rows x cols matrix with row stride cols + pad: `fill` for the elements, `padding` past them.
template <class T, class Fill>
std::vector<T> matrix(int64_t rows, int64_t cols, int64_t pad, Fill fill, double padding) {
  const int64_t ld = cols + pad;
  std::vector<T> data(static_cast<size_t>(rows * ld), element<T>(padding));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) data[i * ld + j] = element<T>(fill());
  }
  return data;
}

// T: the operands' storage type, R: the result's.
template <class T, class R>
void check(const Types& types, const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(types, c));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  const auto random = [&] { return uniform(rng); };
  const auto nan = [] { return kNaN; };

  const int64_t a_rows = c.trans_a ? c.k : c.m, a_cols = c.trans_a ? c.m : c.k;
  const int64_t b_rows = c.trans_b ? c.n : c.k, b_cols = c.trans_b ? c.k : c.n;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
  const std::vector<T> a = matrix<T>(a_rows, a_cols, c.pad, random, kNaN);
  const std::vector<T> b = matrix<T>(b_rows, b_cols, c.pad, random, kNaN);
  // With beta 0, C must not be read: NaN there would spread into the result.
  std::vector<R> out = c.beta == 0 ? matrix<R>(c.m, c.n, c.pad, nan, kSentinel)
                                   : matrix<R>(c.m, c.n, c.pad, random, kSentinel);
  const std::vector<R> before = out;

  gemm(types.operands, types.result, c.trans_a, c.trans_b, c.m, c.n, c.k, c.alpha, a.data(), lda,
       b.data(), ldb, c.beta, out.data(), ldc);

  // Each product's rounding error is bounded relative to the sum of magnitudes of its terms;
  // bf16 adds the final rounding of the result (half a unit in the last of 8 bits).
  const double rounding = types.operands == DType::f64 ? 1e-13 : 1e-5;
  const double final_rounding = types.result == DType::bf16 ? 1.0 / 256 : 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double x = value(c.trans_a ? a[p * lda + i] : a[i * lda + p]);
        const double y = value(c.trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        sum += x * y;
        magnitude += std::abs(x * y);
      }
      double expected = c.alpha * sum;
      magnitude *= std::abs(c.alpha);
      if (c.beta != 0) {
        expected += c.beta * value(before[i * ldc + j]);
        magnitude += std::abs(c.beta * value(before[i * ldc + j]));
      }
      const double actual = value(out[i * ldc + j]);
      ASSERT_NEAR(actual, expected, rounding * magnitude + final_rounding * std::abs(expected))
          << "at C[" << i << ", " << j << "]";
    }
    for (int64_t j = c.n; j < ldc; ++j) {
      ASSERT_EQ(value(out[i * ldc + j]), kSentinel) << "padding of C written at row " << i;
    }
  }
}

void check(const Types& types, const Case& c, uint32_t seed) {
  switch (types.operands) {
    case DType::f32:
      return check<float, float>(types, c, seed);
    case DType::f64:
      return check<double, double>(types, c, seed);
    default:
      return types.result == DType::f32 ? check<uint16_t, float>(types, c, seed)
                                        : check<uint16_t, uint16_t>(types, c, seed);
  }
}

class GemmTest : public ::testing::TestWithParam<Types> {};

// bf16 operands into an f32 result: autocast's products.
INSTANTIATE_TEST_SUITE_P(
    Dtypes, GemmTest,
    ::testing::Values(Types{DType::f32, DType::f32}, Types{DType::f64, DType::f64},
                      Types{DType::bf16, DType::bf16}, Types{DType::bf16, DType::f32}),
    [](const ::testing::TestParamInfo<Types>& info) { return name(info.param); });

// Runs `c` for each of the four transpose combinations.
void check_transposes(const Types& types, Case c, uint32_t seed) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      c.trans_a = trans_a;
      c.trans_b = trans_b;
      check(types, c, seed++);
    }
  }
}

TEST_P(GemmTest, MatchesTheReferenceForEveryTransposition) {
  check_transposes(GetParam(), {.m = 37, .n = 23, .k = 19, .pad = 0, .alpha = 1, .beta = 0}, 1);
  // Big enough for the libraries' blocked kernels and their edge handling.
  check_transposes(GetParam(), {.m = 70, .n = 65, .k = 129, .pad = 0, .alpha = 1, .beta = 0}, 11);
}

// Past 1024 rows or columns of C and 512 terms per sum: bf16 without a bf16 kernel multiplies
// block by block, beta applied once and the later blocks of sums accumulated.
TEST_P(GemmTest, ShapesCrossingTheBlocksOfTheFallback) {
  check_transposes(GetParam(), {.m = 1030, .n = 3, .k = 600, .pad = 3, .alpha = -1.5, .beta = 0.75},
                   91);
  check_transposes(GetParam(), {.m = 5, .n = 1027, .k = 1100, .pad = 0, .alpha = 1, .beta = 0}, 95);
  check_transposes(GetParam(), {.m = 1030, .n = 1029, .k = 3, .pad = 1, .alpha = 1, .beta = 0.5},
                   99);
}

// f32 products with C this wide (n from 2048) run on copies of the operands in the layouts
// oneDNN reads fastest; padded rows, alpha and beta included.
TEST_P(GemmTest, WideProductsOnPackedOperands) {
  check_transposes(GetParam(), {.m = 40, .n = 2050, .k = 70, .pad = 2, .alpha = 0.5, .beta = 1},
                   111);
}

TEST_P(GemmTest, RowStridesLongerThanTheRows) {
  check_transposes(GetParam(), {.m = 17, .n = 29, .k = 13, .pad = 5, .alpha = 1, .beta = 0}, 21);
  check_transposes(GetParam(), {.m = 17, .n = 29, .k = 13, .pad = 3, .alpha = 1, .beta = 1}, 31);
}

TEST_P(GemmTest, BetaOneAccumulates) {
  check_transposes(GetParam(), {.m = 19, .n = 21, .k = 33, .pad = 0, .alpha = 1, .beta = 1}, 41);
}

TEST_P(GemmTest, AlphaAndBetaScale) {
  check_transposes(GetParam(), {.m = 19, .n = 21, .k = 33, .pad = 2, .alpha = -1.5, .beta = 0.75},
                   51);
  check_transposes(GetParam(), {.m = 19, .n = 21, .k = 33, .pad = 0, .alpha = 0.25, .beta = 0}, 61);
}

TEST_P(GemmTest, SingleRowsAndColumns) {
  check_transposes(GetParam(), {.m = 1, .n = 45, .k = 31, .pad = 0, .alpha = 1, .beta = 0}, 71);
  check_transposes(GetParam(), {.m = 45, .n = 1, .k = 31, .pad = 0, .alpha = 1, .beta = 0}, 81);
  check_transposes(GetParam(), {.m = 1, .n = 1, .k = 31, .pad = 2, .alpha = 2, .beta = 1}, 91);
  check_transposes(GetParam(), {.m = 9, .n = 7, .k = 1, .pad = 1, .alpha = 1, .beta = 0}, 101);
}

TEST_P(GemmTest, EmptyInnerDimensionScalesC) {
  // k == 0: C = beta * C, and with beta 0 the NaN in C is overwritten with zeros.
  check_transposes(GetParam(), {.m = 6, .n = 5, .k = 0, .pad = 1, .alpha = 1, .beta = 0}, 111);
  check_transposes(GetParam(), {.m = 6, .n = 5, .k = 0, .pad = 1, .alpha = 1, .beta = 1}, 121);
  check_transposes(GetParam(), {.m = 6, .n = 5, .k = 0, .pad = 0, .alpha = 3, .beta = -2}, 131);
}

TEST_P(GemmTest, EmptyResultTouchesNothing) {
  check_transposes(GetParam(), {.m = 0, .n = 5, .k = 4, .pad = 0, .alpha = 1, .beta = 0}, 141);
  check_transposes(GetParam(), {.m = 5, .n = 0, .k = 4, .pad = 2, .alpha = 1, .beta = 0}, 151);
}

TEST_P(GemmTest, RepeatedShapesGiveFreshResults) {
  // A cached primitive must read the new operands and scales of each call.
  for (uint32_t seed = 161; seed < 166; ++seed) {
    check(GetParam(), {false, true, 24, 18, 40, 0, 1, 0}, seed);
  }
  check(GetParam(), {false, true, 24, 18, 40, 0, 0.5, 1}, 166);
}

TEST_P(GemmTest, ConcurrentCallsFromSeveralThreads) {
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([dtype = GetParam(), t] {
      for (uint32_t i = 0; i < 6; ++i) {
        // Two threads share each shape, the others differ.
        check(dtype, {i % 2 == 1, t % 2 == 1, 30 + t / 2, 20 + i, 50, 1, 1, i % 2 == 0 ? 0.0 : 1.0},
              1000 + 10 * t + i);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

// How a batched product's operands are laid out.
struct BatchLayout {
  bool interleaved_b;  // B a view whose batch dims interleave with its rows: [2, k, 3, n] read
                       // as [2, 3, k, n], as attention's heads are; else dense
  bool broadcast_a, broadcast_b;  // the operand shared by the first batch dim (stride 0)
};

// A batch [2, 3] of products with A dense per matrix, every transposition, against a double
// triple loop per matrix.
template <class T, class R>
void check_batched(const Types& types, bool trans_a, bool trans_b, BatchLayout layout,
                   uint32_t seed) {
  SCOPED_TRACE(name(types) + (trans_a ? " A^T" : " A") + (trans_b ? " B^T" : " B") +
               (layout.interleaved_b ? " interleaved B" : " dense B") +
               (layout.broadcast_a ? ", A broadcast" : "") +
               (layout.broadcast_b ? ", B broadcast" : ""));
  constexpr int64_t kOuter = 2, kInner = 3, m = 19, n = 13, k = 37;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  std::vector<T> a(kOuter * kInner * a_rows * a_cols), b(kOuter * kInner * b_rows * b_cols);
  for (T& x : a) x = element<T>(uniform(rng));
  for (T& x : b) x = element<T>(uniform(rng));
  GemmBatch batch;
  batch.rank = 2;
  batch.sizes[0] = kOuter;
  batch.sizes[1] = kInner;
  batch.a_strides[0] = layout.broadcast_a ? 0 : kInner * a_rows * a_cols;
  batch.a_strides[1] = a_rows * a_cols;
  // Interleaved, B's rows hold kInner matrices side by side: row stride kInner * b_cols.
  const int64_t ldb = layout.interleaved_b ? kInner * b_cols : b_cols;
  batch.b_strides[0] = layout.broadcast_b ? 0 : kInner * b_rows * b_cols;
  batch.b_strides[1] = layout.interleaved_b ? b_cols : b_rows * b_cols;
  std::vector<R> out(kOuter * kInner * m * n, element<R>(kNaN));
  gemm_batched(types.operands, types.result, trans_a, trans_b, m, n, k, a.data(), a_cols, b.data(),
               ldb, out.data(), batch);
  const double rounding = types.operands == DType::f64 ? 1e-13 : 1e-5;
  const double final_rounding = types.result == DType::bf16 ? 1.0 / 256 : 0;
  for (int64_t o = 0; o < kOuter; ++o) {
    for (int64_t h = 0; h < kInner; ++h) {
      const T* pa = a.data() + o * batch.a_strides[0] + h * batch.a_strides[1];
      const T* pb = b.data() + o * batch.b_strides[0] + h * batch.b_strides[1];
      const R* pc = out.data() + (o * kInner + h) * m * n;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, magnitude = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double x = value(trans_a ? pa[p * a_cols + i] : pa[i * a_cols + p]);
            const double y = value(trans_b ? pb[j * ldb + p] : pb[p * ldb + j]);
            sum += x * y;
            magnitude += std::abs(x * y);
          }
          ASSERT_NEAR(value(pc[i * n + j]), sum,
                      rounding * magnitude + final_rounding * std::abs(sum))
              << "matrix [" << o << ", " << h << "] at C[" << i << ", " << j << "]";
        }
      }
    }
  }
}

TEST_P(GemmTest, BatchedProductsMatchTheReference) {
  const Types types = GetParam();
  const int64_t fallbacks = gemm_batched_fallbacks();
  uint32_t seed = 201;
  for (BatchLayout layout : {BatchLayout{true, false, false}, BatchLayout{true, false, true},
                             BatchLayout{false, true, false}, BatchLayout{false, false, false}}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        switch (types.operands) {
          case DType::f32:
            check_batched<float, float>(types, trans_a, trans_b, layout, seed++);
            break;
          case DType::f64:
            check_batched<double, double>(types, trans_a, trans_b, layout, seed++);
            break;
          default:
            if (types.result == DType::f32) {
              check_batched<uint16_t, float>(types, trans_a, trans_b, layout, seed++);
            } else {
              check_batched<uint16_t, uint16_t>(types, trans_a, trans_b, layout, seed++);
            }
        }
      }
    }
  }
  // Where oneDNN runs the products, it took every one of these batches whole (f64 has no
  // oneDNN matmul and always goes one matrix at a time, uncounted).
  if (std::string(gemm_library(DType::f32)).starts_with("oneDNN")) {
    EXPECT_EQ(gemm_batched_fallbacks(), fallbacks);
  }
}

TEST_P(GemmTest, NamesItsLibrary) {
  const std::string library = gemm_library(GetParam().operands);
  EXPECT_TRUE(library.starts_with("OpenBLAS 0.") || library.starts_with("oneDNN ")) << library;
  // oneDNN has no f64 matmul.
  if (GetParam().operands == DType::f64) {
    EXPECT_TRUE(library.starts_with("OpenBLAS ")) << library;
  }
  // The public name says when bf16 operands are widened (no oneDNN bf16 kernel on this CPU).
  const std::string public_name = lt::matmul_library(GetParam().operands);
  EXPECT_TRUE(public_name.starts_with(library)) << public_name;
  const bool widened = GetParam().operands == DType::bf16 && !library.starts_with("oneDNN");
  EXPECT_EQ(public_name.ends_with("(bf16 operands widened to f32)"), widened) << public_name;
}

// The instructions products run on: bf16 ones only for bf16 products that oneDNN computes in
// bf16, and only ones the CPU has; the public name is the backend's.
TEST_P(GemmTest, NamesItsInstructions) {
  const DType operands = GetParam().operands;
  const std::string isa = gemm_isa(operands);
  const std::set<std::string> known = {"amx", "avx512_bf16", "avx512", "avx2", "sse4.1"};
  EXPECT_TRUE(known.count(isa)) << isa;
  const bool bf16_instructions = isa == "amx" || isa == "avx512_bf16";
  const bool bf16_kernel =
      operands == DType::bf16 && std::string(gemm_library(operands)).starts_with("oneDNN");
  EXPECT_TRUE(!bf16_instructions || bf16_kernel) << isa;
  if (isa == "amx" || isa.starts_with("avx512")) {
    EXPECT_TRUE(__builtin_cpu_supports("avx512f"));
  }
  if (isa == "avx2") {
    EXPECT_TRUE(__builtin_cpu_supports("avx2"));
  }
  EXPECT_EQ(lt::matmul_isa(operands), isa);
}

TEST(GemmBf16Test, RoundsTheF32ResultToNearestEven) {
  // C[0, j] = 1 * 1 + 1 * B[1, j] in f32, exactly: 1 + 2^-8 lies halfway between 1 and the next
  // bf16 (1 + 2^-7) and rounds to even 1; 1 + 3 * 2^-8 rounds up to even 1 + 2^-6. A NaN
  // operand gives NaN.
  const std::vector<uint16_t> a = {bf16_bits(1), bf16_bits(1)};
  const std::vector<uint16_t> b = {bf16_bits(1),
                                   bf16_bits(1),
                                   bf16_bits(1),
                                   bf16_bits(std::ldexp(1.0, -8)),
                                   bf16_bits(3 * std::ldexp(1.0, -8)),
                                   bf16_bits(kNaN)};
  std::vector<uint16_t> c(3);
  gemm(DType::bf16, false, false, 1, 3, 2, 1, a.data(), 2, b.data(), 3, 0, c.data(), 3);
  EXPECT_EQ(bf16_value(c[0]), 1.0);
  EXPECT_EQ(bf16_value(c[1]), 1 + std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isnan(bf16_value(c[2])));
}

TEST(GemmErrorTest, RejectsDtypesWithoutAMultiply) {
  float x = 1, y = 1, z = 0;
  for (DType dtype : {DType::f16, DType::i32, DType::i64, DType::boolean}) {
    try {
      gemm(dtype, false, false, 1, 1, 1, 1, &x, 1, &y, 1, 0, &z, 1);
      FAIL() << "no error for dtype " << static_cast<int>(dtype);
    } catch (const Error& error) {
      EXPECT_TRUE(std::string(error.what()).starts_with("matmul:")) << error.what();
    }
    EXPECT_THROW(gemm_library(dtype), Error);
    EXPECT_THROW(lt::matmul_library(dtype), Error);
  }
}

TEST(GemmErrorTest, RejectsMixedDtypesOtherThanBf16IntoF32) {
  double x = 1, y = 1, z = 0;
  const std::pair<DType, DType> refused[] = {
      {DType::f32, DType::bf16}, {DType::f32, DType::f64}, {DType::f64, DType::f32}};
  for (const auto& [operands, result] : refused) {
    try {
      gemm(operands, result, false, false, 1, 1, 1, 1, &x, 1, &y, 1, 0, &z, 1);
      FAIL() << "no error for " << name(Types{operands, result});
    } catch (const Error& error) {
      EXPECT_TRUE(std::string(error.what()).starts_with("matmul: no matrix multiply of "))
          << error.what();
    }
    EXPECT_EQ(z, 0) << "C written by a refused multiply";
  }
}

TEST(GemmErrorTest, RejectsRowStridesShorterThanTheRows) {
  const std::vector<float> a(12), b(12);
  std::vector<float> c(12);
  EXPECT_THROW(gemm(DType::f32, false, false, 3, 4, 3, 1, a.data(), 2, b.data(), 4, 0, c.data(), 4),
               Error);
  EXPECT_THROW(gemm(DType::f32, false, true, 3, 4, 3, 1, a.data(), 3, b.data(), 2, 0, c.data(), 4),
               Error);
  EXPECT_THROW(gemm(DType::f32, false, false, 3, 4, 3, 1, a.data(), 3, b.data(), 4, 0, c.data(), 3),
               Error);
}

}  // namespace
}  // namespace lt::backend::cpu
