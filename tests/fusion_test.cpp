// Fusion, observed through lt::last_step_stats() and the metrics counters: elementwise chains
// become one kernel (vertical fusion), one program over many tensors becomes one launch
// (horizontal fusion), reductions absorb their elementwise producers, in-place updates write
// into the buffers they replace (donation) without clobbering a value still read, and random
// elementwise graphs match the reference evaluator, interpreted and compiled.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "random_program.h"
#include "test_support.h"

namespace {

using lt_test::counter;
using lt_test::expect_close;
using lt_test::Restore;
using lt_test::settle;
using lt_test::Tol;
using lt_test::widen;

using lt::Shape;
using lt::Tensor;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

constexpr Tol kF32{1e-5, 1e-6};
// Transcendental functions in f32 are a few ulps off.
constexpr Tol kF32Transcendental{1e-5, 1e-5};

// A sum of many rounded terms is accurate relative to the sum of their magnitudes.
void expect_sum_close(double got, double want, double magnitude) {
  EXPECT_NEAR(got, want, 1e-6 + 1e-4 * magnitude);
}

class FusionTest : public lt_test::EngineTest {};

// --- Vertical fusion. ---

TEST_F(FusionTest, ElementwiseChainIsOneKernel) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  const std::vector<float> bv = values(n);
  const std::vector<float> cv = values(n, 0.5, 2);
  const Tensor a = lt::from_vector(av, {n});
  const Tensor b = lt::from_vector(bv, {n});
  const Tensor c = lt::from_vector(cv, {n});
  settle();
  const int64_t launches = counter("KernelLaunch");
  const int64_t allocations = counter("DeviceAllocation");

  const Tensor y = ((a * 2.0 + b).tanh() * c - a).abs().add(1.0).sqrt() / c;
  lt::mark_step();
  lt::wait_device_ops();
  const lt::StepStats stats = lt::last_step_stats();
  EXPECT_EQ(stats.kernels, 1);
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.outputs, 1);
  EXPECT_EQ(counter("KernelLaunch") - launches, 1);
  // The output and nothing else: no intermediate reaches memory.
  EXPECT_EQ(counter("DeviceAllocation") - allocations, 1);
  std::vector<double> want(av.size());
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = std::sqrt(std::abs(std::tanh(av[i] * 2.0 + bv[i]) * cv[i] - av[i]) + 1) / cv[i];
  }
  expect_close(y.to_vector<double>(), want, kF32Transcendental);
}

// Live intermediates of one chain are extra outputs of the same kernel.
TEST_F(FusionTest, SharedSubexpressionWithSeveralOutputsIsOneKernel) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  const std::vector<float> bv = values(n);
  const Tensor a = lt::from_vector(av, {n});
  const Tensor b = lt::from_vector(bv, {n});
  settle();

  std::vector<double> t(av.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<double>(av[i]) * bv[i];
  auto plus_one = [&] {
    std::vector<double> out(t);
    for (double& v : out) v += 1;
    return out;
  };
  auto twice = [&] {
    std::vector<double> out(t);
    for (double& v : out) v *= 2;
    return out;
  };
  {
    Tensor shared = a * b;
    const Tensor u = shared + 1.0;
    const Tensor v = shared * 2.0;
    shared = Tensor();  // dead: computed inside the kernel, never stored
    lt::mark_step();
    EXPECT_EQ(lt::last_step_stats().kernels, 1);
    EXPECT_EQ(lt::last_step_stats().outputs, 2);
    expect_close(u.to_vector<double>(), plus_one(), kF32);
    expect_close(v.to_vector<double>(), twice(), kF32);
  }
  {
    const Tensor shared = a * b;
    const Tensor u = shared + 1.0;
    const Tensor v = shared * 2.0;
    lt::mark_step();
    EXPECT_EQ(lt::last_step_stats().kernels, 1);
    EXPECT_EQ(lt::last_step_stats().outputs, 3);
    expect_close(shared.to_vector<double>(), t, kF32);
    expect_close(u.to_vector<double>(), plus_one(), kF32);
    expect_close(v.to_vector<double>(), twice(), kF32);
  }
}

// A value that a user broadcasts is materialized once, not recomputed per broadcast element.
TEST_F(FusionTest, BroadcastProducerIsMaterialized) {
  const int64_t rows = 1001;
  const std::vector<float> av = values(rows);
  const std::vector<float> bv = values(rows * 4);
  const Tensor a = lt::from_vector(av, {rows, 1});
  const Tensor b = lt::from_vector(bv, {rows, 4});
  settle();

  Tensor x = a + 1.0;
  const Tensor y = x * b;
  x = Tensor();
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().kernels, 2);
  EXPECT_EQ(lt::last_step_stats().outputs, 1);
  std::vector<double> want(bv.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 4; ++c) want[r * 4 + c] = (av[r] + 1.0) * bv[r * 4 + c];
  }
  expect_close(y.to_vector<double>(), want, kF32);
}

// --- Reductions. ---

TEST_F(FusionTest, ReductionAbsorbsItsElementwiseProducers) {
  // Above one work unit, so that the sum is split across threads and combined.
  const int64_t n = 200003;
  const std::vector<float> av = values(n);
  const std::vector<float> bv = values(n);
  const Tensor a = lt::from_vector(av, {n});
  const Tensor b = lt::from_vector(bv, {n});
  settle();
  double want_sum = 0, magnitude = 0, want_norm = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    const double term = static_cast<double>(av[i]) * bv[i] + 1;
    want_sum += term;
    magnitude += std::abs(term);
    const double d = static_cast<double>(av[i]) - bv[i];
    want_norm += d * d;
  }
  want_norm = std::sqrt(want_norm);

  const int64_t allocations = counter("DeviceAllocation");
  const Tensor total = (a * b + 1.0).sum();
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(lt::last_step_stats().kernels, 1);
  // The rank-0 result only: the producer is never stored.
  EXPECT_EQ(counter("DeviceAllocation") - allocations, 1);
  expect_sum_close(total.item(), want_sum, magnitude);

  const Tensor distance = (a - b).norm();
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().kernels, 1);
  expect_sum_close(distance.item(), want_norm, want_norm);
}

TEST_F(FusionTest, ReductionOverDimsAbsorbsItsProducers) {
  const int64_t rows = 41;
  const int64_t cols = 37;
  const std::vector<float> xv = values(rows * cols);
  const Tensor x = lt::from_vector(xv, {rows, cols});
  settle();

  const Tensor column_mean = (x.exp() * 0.5).mean({0});
  const Tensor row_max = (x * x).max({-1}, /*keepdim=*/true);
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().kernels, 2);
  EXPECT_EQ(column_mean.shape().to_vector(), (std::vector<int64_t>{cols}));
  EXPECT_EQ(row_max.shape().to_vector(), (std::vector<int64_t>{rows, 1}));
  std::vector<double> want_mean(cols, 0.0);
  std::vector<double> want_max(rows, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const double v = xv[r * cols + c];
      want_mean[c] += std::exp(v) * 0.5 / static_cast<double>(rows);
      want_max[r] = std::max(want_max[r], v * v);
    }
  }
  expect_close(column_mean.to_vector<double>(), want_mean, {1e-5, 1e-6});
  expect_close(row_max.to_vector<double>(), want_max, kF32);
}

// A reduction whose input also feeds elementwise users: the kernels must form no cycle.
TEST_F(FusionTest, SoftmaxLikeGraphIsCorrect) {
  const int64_t rows = 5;
  const int64_t cols = 29;
  const std::vector<float> xv = values(rows * cols, -2, 2);
  const Tensor x = lt::from_vector(xv, {rows, cols});
  settle();
  std::vector<double> e(xv.size()), sums(rows, 0.0), want(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      e[r * cols + c] = std::exp(static_cast<double>(xv[r * cols + c]));
      sums[r] += e[r * cols + c];
    }
  }
  for (int64_t i = 0; i < rows * cols; ++i) want[i] = e[i] / sums[i / cols];

  {
    Tensor ex = x.exp();
    Tensor s = ex.sum({1}, /*keepdim=*/true);
    const Tensor y = ex / s;
    ex = Tensor();
    s = Tensor();
    lt::mark_step();
    EXPECT_EQ(lt::last_step_stats().outputs, 1);
    expect_close(y.to_vector<double>(), want, kF32Transcendental);
  }
  {
    const Tensor ex = x.exp();
    const Tensor s = ex.sum({1}, /*keepdim=*/true);
    const Tensor y = ex / s;
    lt::mark_step();
    EXPECT_EQ(lt::last_step_stats().outputs, 3);
    expect_close(ex.to_vector<double>(), e, kF32Transcendental);
    expect_close(s.to_vector<double>(), sums, kF32Transcendental);
    expect_close(y.to_vector<double>(), want, kF32Transcendental);
  }
}

// Two reductions in a chain, each feeding elementwise users of the same data.
TEST_F(FusionTest, LayerNormLikeGraphIsCorrect) {
  const int64_t rows = 4;
  const int64_t cols = 33;
  const std::vector<float> xv = values(rows * cols, -3, 3);
  const Tensor x = lt::from_vector(xv, {rows, cols});
  settle();

  const Tensor centered = x - x.mean({1}, /*keepdim=*/true);
  const Tensor variance = (centered * centered).mean({1}, /*keepdim=*/true);
  const Tensor y = centered / (variance + 1e-5).sqrt();
  lt::mark_step();
  std::vector<double> want(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += xv[r * cols + c] / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double d = xv[r * cols + c] - mean;
      var += d * d / static_cast<double>(cols);
    }
    for (int64_t c = 0; c < cols; ++c) {
      want[r * cols + c] = (xv[r * cols + c] - mean) / std::sqrt(var + 1e-5);
    }
  }
  expect_close(y.to_vector<double>(), want, {1e-4, 1e-5});
}

// --- Horizontal fusion and donation: the HuggingFace AdamW step. ---

// transformers' AdamW update for one parameter, traced as the optimizer traces it.
void adamw_update(Tensor& p, const Tensor& g, Tensor& exp_avg, Tensor& exp_avg_sq, double lr,
                  double beta1, double beta2, double eps, double weight_decay, int step) {
  exp_avg.mul_(beta1).add_(g, 1.0 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
  const Tensor denom = exp_avg_sq.sqrt().add_(eps);
  const double step_size =
      lr * std::sqrt(1.0 - std::pow(beta2, step)) / (1.0 - std::pow(beta1, step));
  p.addcdiv_(exp_avg, denom, -step_size);
  p.add_(p, -lr * weight_decay);
}

TEST_F(FusionTest, AdamWOverTensorsOfManySizesIsOneLaunchInPlace) {
  const std::vector<Shape> shapes = {{0},    {1},      {7},    {101},  {65537}, {},
                                     {3, 5}, {64, 33}, {1, 7}, {4, 0}, {5001}};
  const size_t count = shapes.size();
  constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-6, kWeightDecay = 0.01;
  std::vector<Tensor> p, g, m, v;
  std::vector<std::vector<double>> pd, gd, md, vd;  // the same update in double
  for (const Shape& shape : shapes) {
    const std::vector<float> pv = values(shape.numel());
    const std::vector<float> gv = values(shape.numel());
    p.push_back(lt::from_vector(pv, shape));
    g.push_back(lt::from_vector(gv, shape));
    m.push_back(lt::zeros(shape));
    v.push_back(lt::zeros(shape));
    pd.push_back(widen(pv));
    gd.push_back(widen(gv));
    md.emplace_back(pv.size(), 0.0);
    vd.emplace_back(pv.size(), 0.0);
  }
  settle();

  int64_t bytes_in_use = 0;
  int64_t allocations = 0;
  int64_t donations = 0;
  for (int step = 1; step <= 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double lr = 1e-2 / step;  // a schedule: new scalar values every step
    if (step == 2) {
      // From here on all state is device data: steps must reuse its buffers.
      lt::wait_device_ops();
      bytes_in_use = lt::device_memory_stats().bytes_in_use;
      allocations = counter("DeviceAllocation");
      donations = counter("DonatedBuffer");
    }
    const int64_t launches = counter("KernelLaunch");
    for (size_t i = 0; i < count; ++i) {
      adamw_update(p[i], g[i], m[i], v[i], lr, kBeta1, kBeta2, kEps, kWeightDecay, step);
    }
    lt::mark_step();
    lt::wait_device_ops();
    for (size_t i = 0; i < count; ++i) {
      const double step_size =
          lr * std::sqrt(1.0 - std::pow(kBeta2, step)) / (1.0 - std::pow(kBeta1, step));
      for (size_t k = 0; k < pd[i].size(); ++k) {
        md[i][k] = md[i][k] * kBeta1 + (1 - kBeta1) * gd[i][k];
        vd[i][k] = vd[i][k] * kBeta2 + (1 - kBeta2) * gd[i][k] * gd[i][k];
        pd[i][k] -= step_size * md[i][k] / (std::sqrt(vd[i][k]) + kEps);
        pd[i][k] -= lr * kWeightDecay * pd[i][k];
      }
    }
    if (step == 1) continue;
    const lt::StepStats stats = lt::last_step_stats();
    EXPECT_EQ(stats.kernels, static_cast<int64_t>(count));
    EXPECT_EQ(stats.launches, 1);
    EXPECT_EQ(counter("KernelLaunch") - launches, 1);
    EXPECT_EQ(stats.outputs, static_cast<int64_t>(3 * count));
    EXPECT_EQ(stats.donated_buffers, static_cast<int64_t>(3 * count));
    if (step > 2) {
      EXPECT_TRUE(stats.cache_hit);
    }
  }
  EXPECT_EQ(counter("DeviceAllocation") - allocations, 0);
  EXPECT_EQ(counter("DonatedBuffer") - donations, static_cast<int64_t>(3 * 3 * count));
  EXPECT_EQ(lt::device_memory_stats().bytes_in_use, bytes_in_use);
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE("tensor " + shapes[i].str());
    expect_close(p[i].to_vector<double>(), pd[i], kF32);
    expect_close(m[i].to_vector<double>(), md[i], kF32);
    expect_close(v[i].to_vector<double>(), vd[i], kF32);
  }
}

// --- In-place updates never clobber a value that is still read. ---

TEST_F(FusionTest, InPlaceUpdateReachesAliasesButNotClones) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  settle();

  const Tensor q = p;  // the same tensor, as `q = p` in Python
  const Tensor k = p.clone();
  p.mul_(2.0);
  lt::mark_step();
  std::vector<double> doubled = widen(pv);
  for (double& x : doubled) x *= 2;
  expect_close(p.to_vector<double>(), doubled, kF32);
  expect_close(q.to_vector<double>(), doubled, kF32);
  expect_close(k.to_vector<double>(), widen(pv), kF32);
}

TEST_F(FusionTest, InPlaceUpdateOfAValueReadByOtherKernels) {
  const int64_t rows = 31;
  const std::vector<float> pv = values(rows);
  const std::vector<float> bv = values(rows * 5);
  Tensor p = lt::from_vector(pv, {rows, 1});
  const Tensor b = lt::from_vector(bv, {rows, 5});
  settle();

  // Read by the update's own kernel, by a kernel that broadcasts it and by a reduction.
  const Tensor same_kernel = p * 3.0;
  const Tensor broadcast = p * b;
  const Tensor total = p.sum();
  p.add_(1.0);
  lt::mark_step();
  std::vector<double> want_broadcast(bv.size());
  double want_total = 0, magnitude = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < 5; ++c)
      want_broadcast[r * 5 + c] = pv[r] * static_cast<double>(bv[r * 5 + c]);
    want_total += pv[r];
    magnitude += std::abs(pv[r]);
  }
  std::vector<double> tripled = widen(pv), bumped = widen(pv);
  for (double& x : tripled) x *= 3;
  for (double& x : bumped) x += 1;
  expect_close(same_kernel.to_vector<double>(), tripled, kF32);
  expect_close(broadcast.to_vector<double>(), want_broadcast, kF32);
  expect_sum_close(total.item(), want_total, magnitude);
  expect_close(p.to_vector<double>(), bumped, kF32);
}

// Temporaries live in one arena packed from their lifetimes: in a chain of products each
// result dies when the next is written, so four of them need two results' memory, and the
// values are those of products run one step at a time.
TEST_F(FusionTest, TemporariesWhoseLifetimesDoNotOverlapShareMemory) {
  const int64_t n = 128;
  const Tensor x = lt::from_vector(values(n * n), {n, n});
  const Tensor w = lt::from_vector(values(n * n, -0.1, 0.1), {n, n});
  settle();
  Tensor chained = x;
  for (int k = 0; k < 5; ++k) chained = lt::matmul(chained, w);
  const Tensor total = chained.sum();
  lt::mark_step();
  const int64_t bytes = n * n * 4;
  EXPECT_EQ(lt::last_step_stats().temporary_bytes, 2 * bytes);

  Tensor stepwise = x;
  for (int k = 0; k < 5; ++k) {
    stepwise = lt::matmul(stepwise, w);
    lt::mark_step();
  }
  EXPECT_EQ(chained.to_vector(), stepwise.to_vector());
  EXPECT_EQ(total.item(), stepwise.sum().item());
}

// A value that only its own kernel reads, but for a narrowing cast that a later kernel reads
// (GELU's input kept in bf16 for the backward pass), is cast inside its kernel: the step
// stores the bf16 value, never the f32 one.
TEST_F(FusionTest, ANarrowingCastReadLaterIsStoredByItsProducersKernel) {
  const int64_t n = 4099;
  const std::vector<float> av = values(n);
  const Tensor a = lt::from_vector(av, {n});
  settle();
  Tensor x = a * 2.0 + 1.0;
  const Tensor out = x.exp();
  const Tensor total = out.sum();  // a reduction: what reads the cast runs after it
  const Tensor y = x.to(lt::DType::bf16).to(lt::DType::f32) * total;
  x = Tensor();
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().kernels, 3);
  EXPECT_LT(lt::last_step_stats().temporary_bytes, n * 4) << "x is stored in bf16 only";

  // The reference in double, with x rounded to bf16 to nearest, ties to even.
  const auto bf16 = [](float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x7fff + ((bits >> 16) & 1)) & 0xffff0000u;
    std::memcpy(&f, &bits, 4);
    return static_cast<double>(f);
  };
  double sum = 0;
  for (float v : av) sum += std::exp(2.0 * v + 1.0);
  std::vector<double> want(av.size());
  for (size_t i = 0; i < av.size(); ++i) want[i] = bf16(av[i] * 2.0f + 1.0f) * sum;
  expect_close(y.to_vector<double>(), want, Tol{1e-5, 1e-5});
}

// An update that runs after every other reader of the old value (a parameter read by the
// forward pass, then stepped by an update that depends on the loss) writes over its buffer.
TEST_F(FusionTest, UpdateAfterTheLastOtherReaderTakesTheBuffer) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> xv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor x = lt::from_vector(xv, {n});
  settle();

  const Tensor loss = (p * x).sum();  // reads p; the update below waits for it
  p.sub_(x * loss * 1e-3);
  lt::mark_step();
  EXPECT_EQ(lt::last_step_stats().donated_buffers, 1);
  double want_loss = 0, magnitude = 0;
  for (int64_t k = 0; k < n; ++k) {
    want_loss += static_cast<double>(pv[k]) * xv[k];
    magnitude += std::abs(static_cast<double>(pv[k]) * xv[k]);
  }
  expect_sum_close(loss.item(), want_loss, magnitude);
  std::vector<double> want(n);
  for (int64_t k = 0; k < n; ++k) want[k] = pv[k] - xv[k] * loss.item() * 1e-3;
  expect_close(p.to_vector<double>(), want, kF32);
}

TEST_F(FusionTest, OldValueCapturedByAPendingOpSurvivesTheUpdate) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  settle();

  const Tensor old = p + 0.0;
  p.add_(1.0);
  const Tensor middle = p * 1.0;
  p.mul_(3.0);
  lt::mark_step();
  std::vector<double> bumped = widen(pv), last = widen(pv);
  for (double& x : bumped) x += 1;
  for (double& x : last) x = (x + 1) * 3;
  expect_close(old.to_vector<double>(), widen(pv), kF32);
  expect_close(middle.to_vector<double>(), bumped, kF32);
  expect_close(p.to_vector<double>(), last, kF32);
}

// Reading one tensor before mark_step computes only it: the buffers it replaces may still be
// read by the other pending tensors, so nothing is donated.
TEST_F(FusionTest, ReadBeforeMarkStepDonatesNothing) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  settle();
  const int64_t donations = counter("DonatedBuffer");

  const Tensor y = p * 2.0;
  p.add_(1.0);
  std::vector<double> bumped = widen(pv), doubled = widen(pv);
  for (double& x : bumped) x += 1;
  for (double& x : doubled) x *= 2;
  expect_close(p.to_vector<double>(), bumped, kF32);
  EXPECT_EQ(lt::last_step_stats().donated_buffers, 0);
  EXPECT_EQ(counter("DonatedBuffer"), donations);
  EXPECT_TRUE(y.is_pending());
  lt::mark_step();
  expect_close(y.to_vector<double>(), doubled, kF32);
  expect_close(p.to_vector<double>(), bumped, kF32);
}

// A rank-0 tensor broadcast over a small vector (every scalar under the cached and uncached
// policies). Guarded: a kernel that never finishes would block every later test.
TEST_F(FusionTest, RankZeroOperandOverASmallVector) {
  const lt_test::Watchdog watchdog(60,
                                   [] { return std::string("RankZeroOperandOverASmallVector"); });
  const int64_t n = 5;
  const std::vector<float> av = values(n);
  const Tensor a = lt::from_vector(av, {n});
  const Tensor s = lt::from_vector(std::vector<float>{0.5f}, {});
  settle();

  const Tensor y = a + s;
  lt::mark_step();
  std::vector<double> want = widen(av);
  for (double& x : want) x += 0.5;
  expect_close(y.to_vector<double>(), want, kF32);
}

// --- Random elementwise graphs against the reference evaluator. ---

// `count` random one-step graphs; `test_seed` replays them.
void run_random_graphs(uint64_t seed, int count, uint32_t test_seed) {
  lt_test::ProgramOptions options;
  options.steps = 1;
  options.reductions = false;
  options.gathers = false;   // opaque ops: these graphs are about fused elementwise kernels,
  options.products = false;  // strided (view) reads and selections
  options.partial_sync = 0;
  std::mt19937_64 seeds(seed);
  for (int i = 0; i < count && !testing::Test::HasFailure(); ++i) {
    const std::string label =
        "LT_TEST_SEED=" + std::to_string(test_seed) + ", graph " + std::to_string(i);
    SCOPED_TRACE(label);
    lt_test::RandomProgram(seeds(), options, label).run();
  }
}

TEST_F(FusionTest, RandomElementwiseGraphsMatchTheReference) {
  run_random_graphs(next_seed(), 60, seed());
}

TEST_F(FusionTest, RandomElementwiseGraphsMatchTheReferenceNative) {
  const Restore restore([] {
    lt::set_kernel_compiler("interpreter");
    lt::set_tiered_compilation(true);
  });
  lt::set_kernel_compiler("native");
  lt::set_tiered_compilation(false);  // native code from the first launch
  const int64_t failures = lt_test::counter("NativeCompileFailure");
  // Few graphs: each compiles new kernels with the system compiler.
  run_random_graphs(next_seed(), 3, seed());
  EXPECT_LE(lt_test::counter("NativeCompileFailure"), failures)
      << "the native compiler failed; the interpreter ran";
}

}  // namespace
