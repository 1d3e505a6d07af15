// Autocast (lazytensor/autocast.h): which products run in bf16, their values and gradients
// against double-precision references over the bf16-rounded operands, the thread-local guard,
// and the parameters' kept bf16 copies (reused, never stale, refreshed inside the optimizer's
// kernel).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <thread>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::DType;
using lt::Tensor;
using lt_test::expect_close;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

// x rounded to bf16 (nearest even), as the engine's casts do.
double bf16(double x) {
  uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(x));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return std::bit_cast<float>(bits & 0xffff0000u);
}

std::vector<double> rounded(const std::vector<float>& values) {
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = bf16(values[i]);
  return out;
}

std::vector<double> doubles(const Tensor& t) {
  return t.to(DType::f64).to_vector<double>();
}

// C[m x n] = A[m x k] B[k x n] in double, row-major; `trans_b`: B given as [n x k].
std::vector<double> product(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                            int64_t k, int64_t n, bool trans_b = false) {
  std::vector<double> c(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * k + p] * (trans_b ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = sum;
    }
  }
  return c;
}

std::vector<double> transpose(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  }
  return t;
}

// bf16 operands, sums in f32: a product of k terms is within about k * 2^-24 of the exact sum
// of the rounded operands' products, relative to the sum of magnitudes (bounded here by k).
constexpr lt_test::Tol kF32Sums{1e-5, 1e-5};

class AutocastTest : public lt_test::EngineTest {};

TEST_F(AutocastTest, TheGuardIsPerThreadAndNests) {
  EXPECT_FALSE(lt::is_autocast_enabled());
  EXPECT_EQ(lt::autocast_dtype(), DType::f32);
  {
    const lt::AutocastGuard on(DType::bf16);
    EXPECT_TRUE(lt::is_autocast_enabled());
    EXPECT_EQ(lt::autocast_dtype(), DType::bf16);
    bool other_thread = true;
    std::thread([&] { other_thread = lt::is_autocast_enabled(); }).join();
    EXPECT_FALSE(other_thread) << "autocast leaked into another thread";
    {
      const lt::AutocastGuard off(DType::f32);
      EXPECT_FALSE(lt::is_autocast_enabled());
    }
    EXPECT_TRUE(lt::is_autocast_enabled());
  }
  EXPECT_FALSE(lt::is_autocast_enabled());
  for (DType refused : {DType::f16, DType::f64, DType::i32}) {
    lt_test::expect_mentions(lt_test::error_message([&] { lt::AutocastGuard guard(refused); }),
                             {"AutocastGuard", lt::dtype_name(refused)});
  }
  EXPECT_FALSE(lt::is_autocast_enabled());
}

TEST_F(AutocastTest, MatmulMultipliesBf16OperandsIntoF32) {
  constexpr int64_t M = 13, K = 37, N = 11;
  const std::vector<float> av = values(M * K), bv = values(K * N);
  const Tensor a = lt::from_vector(av, {M, K}), b = lt::from_vector(bv, {K, N});
  Tensor c;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    c = lt::matmul(a, b);
  }
  EXPECT_EQ(c.dtype(), DType::f32);
  expect_close(doubles(c), product(rounded(av), rounded(bv), M, K, N), kF32Sums);
  // Not the f32 product: the operands were rounded (a difference far above f32's sums).
  double largest = 0;
  const std::vector<double> f32 = product(lt_test::widen(av), lt_test::widen(bv), M, K, N);
  const std::vector<double> got = doubles(c);
  for (size_t i = 0; i < got.size(); ++i) largest = std::max(largest, std::abs(got[i] - f32[i]));
  EXPECT_GT(largest, 1e-4) << "the operands were not rounded to bf16";
}

TEST_F(AutocastTest, BatchedVectorAndMixedOperandsAutocastLikeMatrices) {
  const lt::AutocastGuard autocast(DType::bf16);
  // A batch against a shared matrix, one operand already bf16.
  constexpr int64_t B = 3, M = 5, K = 9, N = 4;
  const std::vector<float> av = values(B * M * K), bv = values(K * N);
  const Tensor a = lt::from_vector(av, {B, M, K});
  const Tensor b16 = lt::from_vector(bv, {K, N}).to(DType::bf16);
  const Tensor c = lt::matmul(a, b16);
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_EQ(c.shape(), lt::Shape({B, M, N}));
  expect_close(doubles(c), product(rounded(av), rounded(bv), B * M, K, N), kF32Sums);
  // bmm and a vector on the left.
  const std::vector<float> xv = values(B * K * N);
  const Tensor x = lt::from_vector(xv, {B, K, N});
  const Tensor bmm = lt::bmm(a, x);
  std::vector<double> want;
  const std::vector<double> ar = rounded(av), xr = rounded(xv);
  for (int64_t p = 0; p < B; ++p) {
    const std::vector<double> ap(ar.begin() + p * M * K, ar.begin() + (p + 1) * M * K);
    const std::vector<double> xp(xr.begin() + p * K * N, xr.begin() + (p + 1) * K * N);
    const std::vector<double> cp = product(ap, xp, M, K, N);
    want.insert(want.end(), cp.begin(), cp.end());
  }
  expect_close(doubles(bmm), want, kF32Sums);
  const std::vector<float> vv = values(K);
  const Tensor v = lt::matmul(lt::from_vector(vv, {K}), lt::from_vector(bv, {K, N}));
  EXPECT_EQ(v.shape(), lt::Shape({N}));
  expect_close(doubles(v), product(rounded(vv), rounded(bv), 1, K, N), kF32Sums);
}

TEST_F(AutocastTest, F64ProductsAndOtherOpsAreLeftAlone) {
  const lt::AutocastGuard autocast(DType::bf16);
  constexpr int64_t M = 4, K = 6, N = 3;
  const std::vector<float> av = values(M * K), bv = values(K * N);
  const Tensor c = lt::matmul(lt::from_vector(av, {M, K}).to(DType::f64),
                              lt::from_vector(bv, {K, N}).to(DType::f64));
  EXPECT_EQ(c.dtype(), DType::f64);
  expect_close(doubles(c), product(lt_test::widen(av), lt_test::widen(bv), M, K, N),
               {1e-12, 1e-12});
  // Elementwise ops and reductions compute in their operands' dtype, as without autocast.
  const Tensor x = lt::from_vector(av, {M, K});
  const Tensor s = lt::softmax(x * 3.0, -1);
  EXPECT_EQ(s.dtype(), DType::f32);
  std::vector<double> want(av.size());
  for (int64_t i = 0; i < M; ++i) {
    double total = 0;
    for (int64_t j = 0; j < K; ++j) total += std::exp(3.0 * av[i * K + j]);
    for (int64_t j = 0; j < K; ++j) want[i * K + j] = std::exp(3.0 * av[i * K + j]) / total;
  }
  expect_close(doubles(s), want, {1e-6, 1e-7});
}

// linear(x, W, b) under autocast against double over the rounded operands, forward and
// backward: dL/dx = G16 W16, dL/dW = G16^T x16, dL/db = sum of G (G rounded where a product
// reads it, not in the bias's sum).
TEST_F(AutocastTest, LinearAndItsGradientsUseBf16ProductsWithF32Sums) {
  constexpr int64_t R = 24, In = 40, Out = 12;
  const std::vector<float> xv = values(R * In), wv = values(Out * In), bv = values(Out),
                           gv = values(R * Out);
  Tensor x = lt::from_vector(xv, {R, In}).requires_grad_(true);
  Tensor w = lt::from_vector(wv, {Out, In}).requires_grad_(true);
  Tensor b = lt::from_vector(bv, {Out}).requires_grad_(true);
  const Tensor g = lt::from_vector(gv, {R, Out});
  Tensor y;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    y = lt::linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), DType::f32);
  (y * g).sum().backward();

  std::vector<double> want_y = product(rounded(xv), rounded(wv), R, In, Out, /*trans_b=*/true);
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < Out; ++j) want_y[i * Out + j] += bv[j];
  }
  expect_close(doubles(y), want_y, kF32Sums);
  expect_close(doubles(x.grad()), product(rounded(gv), rounded(wv), R, Out, In), kF32Sums);
  expect_close(doubles(w.grad()), product(transpose(rounded(gv), R, Out), rounded(xv), Out, R, In),
               kF32Sums);
  std::vector<double> want_b(Out, 0.0);
  for (int64_t i = 0; i < R; ++i) {
    for (int64_t j = 0; j < Out; ++j) want_b[j] += gv[i * Out + j];
  }
  expect_close(doubles(b.grad()), want_b, {1e-5, 1e-5});
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().dtype(), DType::f32);
}

// Through a batched matmul (attention's shape, broadcast over a shared matrix) the gradients
// are the full-precision ones to bf16's accuracy, checked against central differences of the
// f32 function in double.
TEST_F(AutocastTest, MatmulGradientsMatchFiniteDifferencesToBf16Accuracy) {
  constexpr int64_t B = 2, M = 3, K = 8, N = 5;
  const std::vector<float> av = values(B * M * K), bv = values(K * N), gv = values(B * M * N);
  Tensor a = lt::from_vector(av, {B, M, K}).requires_grad_(true);
  Tensor b = lt::from_vector(bv, {K, N}).requires_grad_(true);
  {
    const lt::AutocastGuard autocast(DType::bf16);
    (lt::matmul(a, b) * lt::from_vector(gv, {B, M, N})).sum().backward();
  }
  // L(a, b) = sum_{p,i,j} G[p,i,j] (a_p b)[i,j], in double.
  const auto loss = [&](const std::vector<double>& A, const std::vector<double>& Bm) {
    double total = 0;
    for (int64_t p = 0; p < B; ++p) {
      const std::vector<double> ap(A.begin() + p * M * K, A.begin() + (p + 1) * M * K);
      const std::vector<double> c = product(ap, Bm, M, K, N);
      for (int64_t e = 0; e < M * N; ++e) total += gv[p * M * N + e] * c[e];
    }
    return total;
  };
  const auto central = [&](std::vector<double> A, std::vector<double> Bm, bool wrt_a, size_t e) {
    constexpr double h = 1e-3;
    std::vector<double>& x = wrt_a ? A : Bm;
    const double keep = x[e];
    x[e] = keep + h;
    const double up = loss(A, Bm);
    x[e] = keep - h;
    return (up - loss(A, Bm)) / (2 * h);
  };
  const std::vector<double> A = lt_test::widen(av), Bm = lt_test::widen(bv);
  std::vector<double> want_a(A.size()), want_b(Bm.size());
  for (size_t e = 0; e < A.size(); ++e) want_a[e] = central(A, Bm, true, e);
  for (size_t e = 0; e < Bm.size(); ++e) want_b[e] = central(A, Bm, false, e);
  // Each gradient sums up to 2 * M * N terms of rounded factors (relative error 2^-8 each).
  expect_close(doubles(a.grad()), want_a, {2e-2, 4e-2});
  expect_close(doubles(b.grad()), want_b, {2e-2, 8e-2});

  // The same b stored transposed and read through .t(), as nn.Linear's weight is: its
  // gradient is the product of the transposes, in the stored layout.
  std::vector<float> stored(K * N);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) stored[n * K + k] = bv[k * N + n];
  }
  const std::vector<double> want_stored = transpose(want_b, K, N);
  Tensor a2 = lt::from_vector(av, {B, M, K}).requires_grad_(true);
  Tensor weight = lt::from_vector(stored, {N, K}).requires_grad_(true);
  {
    const lt::AutocastGuard autocast(DType::bf16);
    (lt::matmul(a2, weight.t()) * lt::from_vector(gv, {B, M, N})).sum().backward();
  }
  expect_close(doubles(a2.grad()), want_a, {2e-2, 4e-2});
  expect_close(doubles(weight.grad()), want_stored, {2e-2, 8e-2});
}

// A parameter's bf16 copy is made once and reused; written, the parameter is never read
// through a stale copy, whether the write is pending or already computed.
TEST_F(AutocastTest, KeptCopiesAreReusedAndNeverStale) {
  constexpr int64_t R = 6, In = 10, Out = 4;
  const std::vector<float> xv = values(R * In), wv = values(Out * In);
  // bf16 already, so that the only cast a product could need is the weight's.
  const Tensor x = lt::from_vector(xv, {R, In}).to(DType::bf16);
  Tensor w = lt::from_vector(wv, {Out, In}).requires_grad_(true);
  const lt::AutocastGuard autocast(DType::bf16);
  const auto want = [&](const std::vector<float>& weights) {
    return product(rounded(xv), rounded(weights), R, In, Out, /*trans_b=*/true);
  };
  expect_close(doubles(lt::linear(x, w)), want(wv), kF32Sums);
  lt::mark_step();
  // Reused: two products of w in one step, and the copy cast once (in the step before).
  lt_test::settle();
  const Tensor twice = lt::linear(x, w) + lt::linear(x, w);
  lt::mark_step();
  const lt::StepStats reuse = lt::last_step_stats();
  std::vector<double> doubled = want(wv);
  for (double& v : doubled) v *= 2;
  expect_close(doubles(twice), doubled, kF32Sums);
  EXPECT_EQ(reuse.kernels, 3) << "two products and their sum; the weight's copy is not cast again";

  std::vector<float> changed = wv;
  for (float& v : changed) v = v * 0.5f + 0.25f;
  {
    const lt::NoGradGuard no_grad;
    w.mul_(0.5).add_(0.25);  // pending: the next product must read the new value
  }
  expect_close(doubles(lt::linear(x, w)), want(changed), kF32Sums);
  lt::mark_step();
  {
    const lt::NoGradGuard no_grad;
    w.copy_(lt::from_vector(wv, {Out, In}));
  }
  lt::mark_step();  // computed before it is read again
  expect_close(doubles(lt::linear(x, w)), want(wv), kF32Sums);
}

// One input of three products (attention's query, key and value) is cast once.
TEST_F(AutocastTest, AnInputOfSeveralProductsIsCastOnce) {
  constexpr int64_t R = 12, In = 16, Out = 8;
  const std::vector<float> xv = values(R * In);
  const Tensor x = lt::from_vector(xv, {R, In});
  std::vector<std::vector<float>> weights;
  std::vector<Tensor> products;
  lt::mark_step();
  {
    const lt::AutocastGuard autocast(DType::bf16);
    for (int k = 0; k < 3; ++k) {
      weights.push_back(values(Out * In));
      // bf16 weights: the input's is the only cast.
      products.push_back(lt::linear(x, lt::from_vector(weights.back(), {Out, In}).to(DType::bf16)));
    }
  }
  lt::mark_step();
  const lt::StepStats stats = lt::last_step_stats();
  EXPECT_EQ(stats.outputs, 3 + 1) << "three products and the copy of x, kept with x";
  EXPECT_EQ(stats.temporary_bytes, 3 * Out * In * 2) << "the bf16 weights; no other copy of x";
  for (int k = 0; k < 3; ++k) {
    expect_close(doubles(products[k]),
                 product(rounded(xv), rounded(weights[k]), R, In, Out, /*trans_b=*/true), kF32Sums);
  }
}

// A product's operand that is a permuted view (attention's heads) is cast as the view's base:
// the cast joins the kernel that computes the base, whose f32 value is then never stored.
TEST_F(AutocastTest, APermutedOperandIsCastInsideTheKernelOfItsBase) {
  constexpr int64_t R = 8, In = 12, H = 3, D = 4, N = 5;
  const Tensor x = lt::from_vector(values(R * In), {R, In}).to(DType::bf16);
  const Tensor w = lt::from_vector(values(H * D * In), {H * D, In}).to(DType::bf16);
  const Tensor b = lt::from_vector(values(H * D), {H * D});
  const Tensor z = lt::from_vector(values(H * D * N), {H, D, N}).to(DType::bf16);
  lt::mark_step();
  const auto heads = [&] {
    return (lt::linear(x, w) + b).view({R, H, D}).permute({1, 0, 2});  // [H, R, D]
  };
  Tensor through_view, contiguous;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    through_view = lt::matmul(heads(), z);
  }
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().kernels, 3) << "the product, bias + cast, the batched product";
  {
    const lt::AutocastGuard autocast(DType::bf16);
    contiguous = lt::matmul(heads().contiguous(), z);
  }
  EXPECT_EQ(through_view.shape(), lt::Shape({H, R, N}));
  expect_close(doubles(through_view), doubles(contiguous), kF32Sums);
}

// The optimizer's step writes each parameter; its new bf16 copy is traced into the same
// graph at mark_step and is one more output of the update's kernel, not a kernel of its own.
TEST_F(AutocastTest, TheOptimizerStepWritesTheCopyInItsOwnKernel) {
  constexpr int64_t R = 16, In = 24, Out = 8;
  const std::vector<float> xv = values(R * In), wv = values(Out * In);
  const auto train = [&](bool autocast) {
    Tensor w = lt::from_vector(wv, {Out, In}).requires_grad_(true);
    lt::optim::AdamWOptions options;
    options.lr = 1e-2;
    lt::optim::AdamW optimizer({w}, options);
    const Tensor x = lt::from_vector(xv, {R, In});
    lt::StepStats update;
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      {
        const lt::AutocastGuard guard(autocast ? DType::bf16 : DType::f32);
        const Tensor y = lt::linear(x, w);
        (y * y).mean().backward();
      }
      lt::mark_step();
      optimizer.step();
      lt::mark_step();
      update = lt::last_step_stats();
    }
    return std::pair{update, doubles(w)};
  };
  const auto [fp32, fp32_weights] = train(false);
  const auto [bf16_stats, bf16_weights] = train(true);
  EXPECT_EQ(bf16_stats.kernels, fp32.kernels);
  EXPECT_EQ(bf16_stats.launches, fp32.launches);
  EXPECT_EQ(bf16_stats.outputs, fp32.outputs + 1) << "the weight's bf16 copy";
  // Three AdamW steps of lr 1e-2 move the weights alike: an update is about lr * sign(grad),
  // so only where bf16 flips the sign of a near-zero gradient may they part (by up to 2 lr).
  size_t apart = 0;
  for (size_t i = 0; i < fp32_weights.size(); ++i) {
    apart += std::abs(bf16_weights[i] - fp32_weights[i]) > 2e-3;
  }
  EXPECT_LE(apart, fp32_weights.size() / 20);
}

// With the weights' copies made before the first step, every step of a training loop under
// autocast is one graph: compiled once.
TEST_F(AutocastTest, CopiesMadeBeforeTheFirstStepMakeEveryStepOneGraph) {
  constexpr int64_t R = 16, In = 24, Out = 8;
  Tensor w = lt::from_vector(values(Out * In), {Out, In}).requires_grad_(true);
  Tensor b = lt::from_vector(values(Out), {Out}).requires_grad_(true);
  const Tensor x = lt::from_vector(values(R * In), {R, In});
  lt::optim::AdamW optimizer({w, b}, {});
  // b is never multiplied: its copy is dropped at its first write. An i64 tensor is skipped.
  lt::make_autocast_copies({w, b, x, x.to(DType::i64)});
  lt::mark_step();
  lt_test::settle();
  for (int step = 0; step < 4; ++step) {
    optimizer.zero_grad();
    Tensor loss;
    {
      const lt::AutocastGuard autocast(DType::bf16);
      const Tensor y = lt::linear(x, w, b);
      loss = (y * y).mean();
    }
    loss.backward();
    optimizer.step();
    lt::mark_step();
  }
  lt::wait_device_ops();
  EXPECT_EQ(lt_test::counter("UncachedCompile"), 1);
}

// Vectors, a 3-D input of linear and a bf16 leaf that requires grad: values and gradients
// against double over the rounded operands; the bf16 leaf's gradient is bf16.
TEST_F(AutocastTest, VectorsBatchesAndBf16LeavesGetTheirGradients) {
  constexpr int64_t B = 2, L = 3, In = 7, Out = 5;
  const std::vector<float> av = values(Out * In), vv = values(In), xv = values(B * L * In),
                           gv = values(Out);
  Tensor a = lt::from_vector(av, {Out, In}).requires_grad_(true);
  Tensor v = lt::from_vector(vv, {In}).to(DType::bf16).requires_grad_(true);
  Tensor x = lt::from_vector(xv, {B, L, In}).requires_grad_(true);
  Tensor matvec, batch;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    matvec = lt::matmul(a, v);  // [Out]
    batch = lt::linear(x, a);   // [B, L, Out]
  }
  ASSERT_EQ(matvec.shape(), lt::Shape({Out}));
  ASSERT_EQ(batch.shape(), lt::Shape({B, L, Out}));
  const Tensor g = lt::from_vector(gv, {Out});
  ((matvec * g).sum() + (batch * g).sum()).backward();
  expect_close(doubles(matvec), product(rounded(av), rounded(vv), Out, In, 1), kF32Sums);
  // d/da = g v^T + sum over the batch rows of g x_r^T; d/dv = a^T g; d/dx_r = a^T g.
  const std::vector<double> g16 = rounded(gv), a16 = rounded(av), v16 = rounded(vv),
                            x16 = rounded(xv);
  std::vector<double> want_a(Out * In), want_x(B * L * In), want_v(In);
  for (int64_t o = 0; o < Out; ++o) {
    for (int64_t i = 0; i < In; ++i) {
      want_a[o * In + i] = g16[o] * v16[i];
      for (int64_t r = 0; r < B * L; ++r) want_a[o * In + i] += g16[o] * x16[r * In + i];
      want_v[i] += a16[o * In + i] * g16[o];
    }
  }
  for (int64_t r = 0; r < B * L; ++r) {
    for (int64_t i = 0; i < In; ++i) want_x[r * In + i] = want_v[i];
  }
  expect_close(doubles(a.grad()), want_a, kF32Sums);
  expect_close(doubles(x.grad()), want_x, kF32Sums);
  EXPECT_EQ(v.grad().dtype(), DType::bf16);
  expect_close(doubles(v.grad()), want_v, {1.0 / 128, 1e-5});  // the f32 sums rounded to bf16
}

// GELU under autocast keeps its f32 input in bf16 for the backward pass (as PyTorch's autocast
// computes it on a product's bf16 output) and computes its derivative in f32 from that.
TEST_F(AutocastTest, GeluKeepsItsInputInBf16AndDifferentiatesInF32) {
  constexpr int64_t n = 1000;
  const std::vector<float> xv = values(n, -3, 3), gv = values(n);
  Tensor x = lt::from_vector(xv, {n}).requires_grad_(true);
  {
    const lt::AutocastGuard autocast(DType::bf16);
    (lt::gelu(x * 1.5 + 0.25) * lt::from_vector(gv, {n})).sum().backward();
  }
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) {
    const double h = bf16(xv[i] * 1.5f + 0.25f);
    const double derivative =
        0.5 * (1 + std::erf(h / std::sqrt(2.0))) + h * std::exp(-h * h / 2) / std::sqrt(2 * M_PI);
    want[i] = 1.5 * gv[i] * derivative;
  }
  // Tight enough to fail with the input kept in f32 or the derivative rounded to bf16 (both
  // are off by up to 2^-9 relative).
  expect_close(doubles(x.grad()), want, {2e-5, 1e-6});
}

// A product recorded without autocast keeps its full-precision backward when backward() runs
// inside a guard.
TEST_F(AutocastTest, BackwardFollowsThePrecisionTheForwardRecorded) {
  constexpr int64_t M = 6, K = 9, N = 4;
  const std::vector<float> av = values(M * K), bv = values(K * N), gv = values(M * N);
  Tensor a = lt::from_vector(av, {M, K}).requires_grad_(true);
  const Tensor b = lt::from_vector(bv, {K, N});
  const Tensor y = lt::matmul(a, b);
  {
    const lt::AutocastGuard autocast(DType::bf16);
    (y * lt::from_vector(gv, {M, N})).sum().backward();
  }
  expect_close(doubles(a.grad()),
               product(lt_test::widen(gv), transpose(lt_test::widen(bv), K, N), M, N, K), kF32Sums);
}

// A product refused at trace time makes no copy of its operands: nothing extra is computed.
TEST_F(AutocastTest, ARefusedProductLeavesItsOperandsAsTheyWere) {
  const Tensor a = lt::from_vector(values(6), {2, 3});
  Tensor w = lt::from_vector(values(8), {2, 4}).requires_grad_(true);
  {
    const lt::AutocastGuard autocast(DType::bf16);
    EXPECT_THROW(lt::matmul(a, lt::from_vector(values(8), {4, 2})), lt::Error);
    EXPECT_THROW(lt::linear(a, w), lt::Error);
  }
  const Tensor pending = a * 2.0;
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().outputs, 1) << "a bf16 copy of a or w was computed";
}

// Copies of tensors written since their cast are dropped at mark_step unless a parameter's
// copy was read (then it is cast again); the values read later are always current.
TEST_F(AutocastTest, CopiesOfWrittenTensorsAreDroppedOrRefreshed) {
  constexpr int64_t R = 4, In = 6, Out = 3;
  const std::vector<float> xv = values(R * In), wv = values(Out * In);
  Tensor x = lt::from_vector(xv, {R, In});
  Tensor w = lt::from_vector(wv, {Out, In}).requires_grad_(true);
  const Tensor w16 = w.to(DType::bf16);
  Tensor y;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    y = lt::linear(x, w16) + lt::linear(x.to(DType::bf16), w);  // copies of x and w
  }
  lt::mark_step();
  const lt::NoGradGuard no_grad;
  x.mul_(2.0);
  w.mul_(2.0);
  lt::mark_step();  // x's copy dropped; w's copy was read: cast again, one more output
  EXPECT_EQ(lt::last_step_stats().outputs, 3) << "x, w and w's new copy";
  w.mul_(0.5);
  lt::mark_step();  // w's new copy was not read: dropped
  EXPECT_EQ(lt::last_step_stats().outputs, 1) << "w alone";
  std::vector<float> doubled = xv;
  for (float& e : doubled) e *= 2;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    expect_close(doubles(lt::linear(x, w)),
                 product(rounded(doubled), rounded(wv), R, In, Out, /*trans_b=*/true), kF32Sums);
  }
}

// Two threads train their own layers under autocast and cut the graph whenever they like (the
// refresh of the kept copies runs inside each cut): both learn, and both match a run alone.
TEST_F(AutocastTest, ThreadsTrainUnderAutocastWithTheirOwnCuts) {
  constexpr int64_t R = 16, In = 12, Out = 4, kSteps = 12;
  const std::vector<float> xv = values(R * In), wv = values(Out * In), tv = values(R * Out);
  const auto train = [&] {
    Tensor w = lt::from_vector(wv, {Out, In}).requires_grad_(true);
    const Tensor x = lt::from_vector(xv, {R, In}), target = lt::from_vector(tv, {R, Out});
    lt::optim::AdamWOptions options;
    options.lr = 1e-2;
    lt::optim::AdamW optimizer({w}, options);
    std::vector<Tensor> losses;
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      Tensor loss;
      {
        const lt::AutocastGuard autocast(DType::bf16);
        const Tensor e = lt::linear(x, w) - target;
        loss = (e * e).mean();
      }
      loss.backward();
      optimizer.step();
      losses.push_back(loss);
      lt::mark_step();
    }
    std::vector<double> values;
    for (const Tensor& l : losses) values.push_back(l.item());
    return values;
  };
  const std::vector<double> alone = train();
  std::vector<double> first, second;
  std::thread other([&] { second = train(); });
  first = train();
  other.join();
  EXPECT_LT(alone.back(), alone.front());
  expect_close(first, alone, {1e-6, 0});
  expect_close(second, alone, {1e-6, 0});
}

TEST_F(AutocastTest, BadOperandsAreRefusedAsWithoutAutocast) {
  const lt::AutocastGuard autocast(DType::bf16);
  const Tensor a = lt::from_vector(values(6), {2, 3});
  const Tensor before = a.clone();
  lt_test::expect_mentions(lt_test::error_message([&] {
                             lt::matmul(a, lt::from_vector(values(8), {4, 2}));
                           }),
                           {"matmul", "[2, 3]", "[4, 2]"});
  lt_test::expect_mentions(lt_test::error_message([&] {
                             lt::linear(a, lt::from_vector(values(8), {2, 4}));
                           }),
                           {"linear", "4 input features"});
  lt_test::expect_mentions(lt_test::error_message([&] {
                             lt::matmul(a, lt::from_vector(values(6), {3, 2}).to(DType::f64));
                           }),
                           {"matmul", "f32", "f64"});
  expect_close(doubles(a), doubles(before), {0, 0});
}

}  // namespace
