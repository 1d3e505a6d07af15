// The graph executor and the compile cache, observed through the metrics counters and
// lt::last_step_stats(): what compiles, what hits the cache, what runs, what is transferred, and
// that in-place updates and handle aliasing give the values Python references would.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace {

using lt_test::counter;
using lt_test::elementwise;
using lt_test::expect_close;
using lt_test::Restore;
using lt_test::settle;
using lt_test::Tol;
using lt_test::widen;

using lt::Tensor;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

constexpr Tol kF32{1e-5, 1e-5};

class GraphExecutorTest : public lt_test::EngineTest {};

TEST_F(GraphExecutorTest, RepeatedStepCompilesOnce) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> av = values(n);
  const std::vector<float> bv = values(n, 0.5, 2);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor a = lt::from_vector(av, {n});
  const Tensor b = lt::from_vector(bv, {n});
  settle();

  for (int step = 0; step < 5; ++step) {
    p.addcdiv_(a, b, 0.1);
    lt::mark_step();
  }
  lt::wait_device_ops();
  EXPECT_EQ(counter("MarkStep"), 5);
  EXPECT_EQ(counter("UncachedCompile"), 1);
  EXPECT_EQ(counter("CachedCompile"), 4);
  EXPECT_EQ(counter("ExecuteComputation"), 5);
  EXPECT_TRUE(lt::last_step_stats().cache_hit);
  EXPECT_EQ(lt::last_step_stats().outputs, 1);

  std::vector<double> want = widen(pv);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < want.size(); ++i) want[i] += 0.1 * av[i] / bv[i];
  }
  expect_close(p.to_vector<double>(), want, kF32);
}

// Sizes are not part of a graph's key: a new size binds the graph compiled for another, once,
// and computes what that size's own graph computes.
TEST_F(GraphExecutorTest, ANewSizeBindsTheCompiledGraph) {
  const int64_t n = 1000;
  const int64_t m = 3000;
  const std::vector<float> sv = values(n), lv = values(m);
  Tensor small = lt::from_vector(sv, {n});
  Tensor large = lt::from_vector(lv, {m});
  settle();

  small.mul_(0.5);
  lt::mark_step();
  large.mul_(0.5);
  lt::mark_step();
  large.mul_(0.5);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 1);
  EXPECT_EQ(counter("CachedCompile"), 2);
  EXPECT_EQ(counter("SizeBind"), 1) << "the second step of the large size binds nothing";
  EXPECT_TRUE(lt::last_step_stats().cache_hit);
  std::vector<double> want_small = widen(sv), want_large = widen(lv);
  for (double& v : want_small) v *= 0.5;
  for (double& v : want_large) v *= 0.25;
  expect_close(small.to_vector<double>(), want_small, kF32);
  expect_close(large.to_vector<double>(), want_large, kF32);
}

// A size of 1 broadcasts, so it is part of the key: a size that becomes 1 compiles, and the
// recompile says which shape changed.
TEST_F(GraphExecutorTest, ASizeThatBecomesOneRecompiles) {
  Tensor wide = lt::from_vector(values(12), {4, 3});
  Tensor row = lt::from_vector(values(3), {1, 3});
  Tensor bias = lt::from_vector(values(3), {3});
  settle();
  wide.add_(bias);
  lt::mark_step();
  row.add_(bias);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 2);
  lt_test::expect_mentions(lt::last_recompile_reason(), {"shape changed from [4, 3] to [1, 3]"});
}

// With symbolic sizes off, each size compiles a graph of its own.
TEST_F(GraphExecutorTest, WithoutSymbolicSizesANewSizeRecompiles) {
  const Restore restore([] { lt::set_symbolic_sizes(true); });
  lt::set_symbolic_sizes(false);
  Tensor small = lt::from_vector(values(1000), {1000});
  Tensor large = lt::from_vector(values(3000), {3000});
  settle();
  small.mul_(0.5);
  lt::mark_step();
  large.mul_(0.5);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 2);
  EXPECT_EQ(counter("SizeBind"), 0);
  lt_test::expect_mentions(lt::last_recompile_reason(), {"shape changed from [1000] to [3000]"});
}

// A plan that rests on a relation between sizes (here: the slice of a reshape has as many
// elements as the tensor it views, so the result may take over that tensor's buffer) serves
// only sizes that keep it; other sizes compile a plan of their own, and the reason names the
// relation.
TEST_F(GraphExecutorTest, SizesThatBreakThePlansAssumptionsCompileTheirOwn) {
  const std::vector<std::pair<int64_t, int64_t>> runs{{6, 12}, {8, 16}, {8, 10}, {9, 11}};
  std::vector<std::vector<float>> inputs;
  std::vector<Tensor> xs;
  for (const auto& [rows, keep] : runs) {
    inputs.push_back(values(rows * 4));
    xs.push_back(lt::from_vector(inputs.back(), {rows, 4}));
  }
  settle();
  const std::vector<int64_t> compiles_after{1, 1, 2, 2};
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto [rows, keep] = runs[r];
    const Tensor y = xs[r].reshape({2, rows * 2}).slice(1, 0, keep) * 2.0 + 1.0;
    std::vector<double> want;
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < keep; ++j) want.push_back(2.0 * inputs[r][i * rows * 2 + j] + 1.0);
    }
    expect_close(y.to_vector<double>(), want, kF32);
    EXPECT_EQ(counter("UncachedCompile"), compiles_after[r])
        << "rows " << rows << ", keep " << keep;
    if (r == 2) {
      lt_test::expect_mentions(lt::last_recompile_reason(), {"relation between sizes", "elements"});
    }
  }
}

// A value computed by the first step (initialized when first used) is an input of the second:
// the recompile says so in words, then the step graph is reused.
TEST_F(GraphExecutorTest, TheSecondStepsRecompileSaysWhatChangedInWords) {
  const Tensor q = lt::from_vector(values(16), {16});
  settle();
  Tensor p = lt::ones({16}).mul(0.5);
  p.add_(q);
  lt::mark_step();
  p.add_(q);
  lt::mark_step();
  p.add_(q);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 2);
  EXPECT_TRUE(lt::last_step_stats().cache_hit);
  lt_test::expect_mentions(lt::last_recompile_reason(),
                           {"step", "read as device data", "an input instead of being computed",
                            "the first difference"});
}

// Under LT_DEBUG a front end's location provider is asked once per op, and a recompile names
// where the op that differs was traced.
TEST_F(GraphExecutorTest, ARecompileNamesWhereTheOpThatDiffersWasTraced) {
  lt::set_debug(true);
  std::string here = "first.cpp:1";
  lt::set_trace_location_provider([&here] { return here; });
  Tensor a = lt::ones({4}).mul(2.0);
  lt::mark_step();
  here = "second.cpp:2";
  Tensor b = lt::ones({1}).mul(2.0);
  testing::internal::CaptureStderr();
  lt::mark_step();
  testing::internal::GetCapturedStderr();
  lt::set_trace_location_provider(nullptr);
  lt::set_debug(false);
  lt_test::expect_mentions(lt::last_recompile_reason(), {"shape", "(traced at second.cpp:2)"});
}

// The default policy passes scalars as kernel arguments: no upload, no recompile (docs/runtime.md,
// "Scalar policies").
TEST_F(GraphExecutorTest, NewScalarValuesHitTheCache) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::argument);
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> av = values(n);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor a = lt::from_vector(av, {n});
  settle();

  std::vector<double> want = widen(pv);
  for (int step = 0; step < 5; ++step) {
    const double alpha = 0.1 * (step + 2);  // never 0 or +-1, which some policies special-case
    p.add_(a, alpha);
    lt::mark_step();
    for (size_t i = 0; i < want.size(); ++i) want[i] += alpha * av[i];
  }
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 1);
  EXPECT_EQ(counter("CachedCompile"), 4);
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  EXPECT_GE(lt::last_step_stats().scalar_args, 1);
  expect_close(p.to_vector<double>(), want, kF32);
}

// The contrast: baked-in constants recompile for every new value and hit for a repeated one.
TEST_F(GraphExecutorTest, ConstantScalarsRecompilePerValue) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::constant);
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> av = values(n);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor a = lt::from_vector(av, {n});
  settle();

  std::vector<double> want = widen(pv);
  for (double alpha : {0.2, 0.3, 0.4, 0.5, 0.6, 0.2}) {
    p.add_(a, alpha);
    lt::mark_step();
    for (size_t i = 0; i < want.size(); ++i) want[i] += alpha * av[i];
  }
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 5);
  EXPECT_EQ(counter("CachedCompile"), 1);
  expect_close(p.to_vector<double>(), want, kF32);
}

TEST_F(GraphExecutorTest, StepsInFlightGiveTheRightValue) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> av = values(n);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor a = lt::from_vector(av, {n});
  settle();

  std::vector<double> want = widen(pv);
  for (int step = 0; step < 10; ++step) {
    p.mul_(0.5).add_(a);
    lt::mark_step();
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] * 0.5 + av[i];
  }
  EXPECT_EQ(counter("TransferFromDevice"), 0);
  expect_close(p.to_vector<double>(), want, kF32);
  EXPECT_EQ(counter("TransferFromDevice"), 1);
  lt::wait_device_ops();
  EXPECT_EQ(counter("ExecuteComputation"), 10);
}

TEST_F(GraphExecutorTest, DeadTensorsAreNotComputed) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  const Tensor a = lt::from_vector(av, {n});
  settle();

  { const Tensor dead = a * 2.0; }  // dropped before the step
  const Tensor live = a + 1.0;
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(lt::last_step_stats().outputs, 1);
  expect_close(live.to_vector<double>(), elementwise(widen(av), [](double v) { return v + 1; }),
               kF32);

  const int64_t executed = counter("ExecuteComputation");
  { const Tensor dead = a * 3.0; }
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("ExecuteComputation"), executed);
}

TEST_F(GraphExecutorTest, MarkStepWithNothingPendingDoesNothing) {
  const int64_t n = 5001;
  const Tensor a = lt::from_vector(values(n), {n});
  const Tensor b = a * 2.0;
  settle();  // computes b
  const size_t steps = lt::compiles_per_step().size();
  const int64_t last_step = lt::last_step_stats().step;

  lt::mark_step();
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("ExecuteComputation"), 0);
  EXPECT_EQ(counter("UncachedCompile"), 0);
  EXPECT_EQ(counter("CachedCompile"), 0);
  EXPECT_EQ(counter("KernelLaunch"), 0);
  EXPECT_EQ(lt::compiles_per_step().size(), steps);
  EXPECT_EQ(lt::last_step_stats().step, last_step);
}

TEST_F(GraphExecutorTest, ReadingAPendingTensorComputesIt) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  const std::vector<float> bv = values(n);
  const Tensor a = lt::from_vector(av, {n});
  const Tensor b = lt::from_vector(bv, {n});
  settle();

  const Tensor t = a * 2.0 + b;
  EXPECT_TRUE(t.is_pending());
  std::vector<double> want(av.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = 2.0 * av[i] + bv[i];
  expect_close(t.to_vector<double>(), want, kF32);
  EXPECT_FALSE(t.is_pending());
  EXPECT_EQ(counter("TransferFromDevice"), 1);
}

TEST_F(GraphExecutorTest, EveryReadCountsATransferFromDevice) {
  const int64_t n = 5001;
  const Tensor a = lt::from_vector(values(n), {n});
  const Tensor total = a.sum();
  settle();

  const std::vector<float> first = a.to_vector<float>();
  EXPECT_EQ(counter("TransferFromDevice"), 1);
  EXPECT_EQ(widen(first), a.to_vector<double>());
  EXPECT_EQ(counter("TransferFromDevice"), 2);
  total.item();
  EXPECT_EQ(counter("TransferFromDevice"), 3);
}

TEST_F(GraphExecutorTest, FromVectorUploadsAsynchronously) {
  const int64_t n = 5001;
  std::vector<float> source = values(n);
  const std::vector<float> original = source;
  const Tensor a = lt::from_vector(source, {n});
  // The caller may reuse its vector as soon as from_vector returns.
  std::fill(source.begin(), source.end(), 0.0f);
  const Tensor b = lt::from_vector(std::vector<double>{1.0, 2.0}, {2});
  EXPECT_EQ(counter("TransferToDeviceAsync"), 2);
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  EXPECT_EQ(a.to_vector<float>(), original);
  EXPECT_EQ(b.to_vector<double>(), (std::vector<double>{1.0, 2.0}));
}

TEST_F(GraphExecutorTest, WaitDeviceOpsFinishesLaunchedSteps) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  settle();

  for (int step = 0; step < 3; ++step) {
    p.add_(1.0);
    lt::mark_step();
  }
  EXPECT_NO_THROW(lt::wait_device_ops());
  EXPECT_FALSE(p.is_pending());
  expect_close(p.to_vector<double>(), elementwise(widen(pv), [](double v) { return v + 3; }), kF32);
}

// Two handles to one tensor behave like two Python references to one torch.Tensor.
TEST_F(GraphExecutorTest, CopiedHandlesShareInPlaceUpdates) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  Tensor a = lt::from_vector(av, {n});
  settle();

  const Tensor b = a;
  a.add_(1.0);
  EXPECT_TRUE(b.is_pending());
  lt::mark_step();
  expect_close(b.to_vector<double>(), elementwise(widen(av), [](double v) { return v + 1; }), kF32);

  Tensor keep = a;
  a.mul_(3.0);
  keep.sub_(1.0);  // through the other handle
  lt::mark_step();
  const std::vector<double> want = elementwise(widen(av), [](double v) { return (v + 1) * 3 - 1; });
  expect_close(keep.to_vector<double>(), want, kF32);
  expect_close(a.to_vector<double>(), want, kF32);
}

TEST_F(GraphExecutorTest, CloneIsIndependent) {
  const int64_t n = 5001;
  const std::vector<float> av = values(n);
  Tensor a = lt::from_vector(av, {n});
  settle();

  Tensor c = a.clone();
  a.add_(1.0);
  c.mul_(2.0);
  lt::mark_step();
  expect_close(a.to_vector<double>(), elementwise(widen(av), [](double v) { return v + 1; }), kF32);
  expect_close(c.to_vector<double>(), elementwise(widen(av), [](double v) { return v * 2; }), kF32);
}

// A donated buffer must not be one that another live tensor still reads.
TEST_F(GraphExecutorTest, InPlaceNeverClobbersLiveReaders) {
  Tensor x = lt::randn({1000}, next_seed());
  lt::mark_step();
  const std::vector<double> old = x.to_vector<double>();

  const Tensor y = x;          // the same tensor
  const Tensor z = x.clone();  // a copy of the old value
  const Tensor w = x * 2.0;    // a pending reader of the old buffer
  x.add_(1.0);
  lt::mark_step();
  expect_close(w.to_vector<double>(), elementwise(old, [](double v) { return v * 2; }), kF32);
  expect_close(z.to_vector<double>(), old, kF32);
  const std::vector<double> bumped = elementwise(old, [](double v) { return v + 1; });
  expect_close(x.to_vector<double>(), bumped, kF32);
  expect_close(y.to_vector<double>(), bumped, kF32);
}

// The reader's step may still be running when the next step overwrites the tensor it reads.
TEST_F(GraphExecutorTest, InPlaceAfterAReaderInFlight) {
  Tensor x = lt::randn({4096}, next_seed());
  lt::mark_step();
  const std::vector<double> old = x.to_vector<double>();

  const Tensor w = x * 2.0;
  lt::mark_step();
  x.mul_(3.0);
  lt::mark_step();
  expect_close(w.to_vector<double>(), elementwise(old, [](double v) { return v * 2; }), kF32);
  expect_close(x.to_vector<double>(), elementwise(old, [](double v) { return v * 3; }), kF32);
}

// A reduction reads every element; an elementwise update of the same tensor in the same step must
// not reach it first.
TEST_F(GraphExecutorTest, ReductionAndInPlaceUpdateInOneStep) {
  Tensor x = lt::randn({4096}, next_seed());
  lt::mark_step();
  const std::vector<double> old = x.to_vector<double>();

  const Tensor total = x.sum();
  const Tensor peak = x.max();
  x.mul_(3.0);
  lt::mark_step();
  double sum = 0;
  for (double v : old) sum += v;
  EXPECT_NEAR(total.item(), sum, 1e-3 + 1e-4 * std::abs(sum));
  EXPECT_EQ(peak.item(), *std::max_element(old.begin(), old.end()));
  expect_close(x.to_vector<double>(), elementwise(old, [](double v) { return v * 3; }), kF32);
}

// An optimizer-style update writes into the buffer it replaces and allocates nothing.
TEST_F(GraphExecutorTest, InPlaceStepDonatesTheOldBuffer) {
  const int64_t n = 5001;
  const std::vector<float> pv = values(n);
  const std::vector<float> gv = values(n);
  Tensor p = lt::from_vector(pv, {n});
  const Tensor g = lt::from_vector(gv, {n});
  settle();

  p.add_(g, -0.1);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(lt::last_step_stats().outputs, 1);
  EXPECT_EQ(lt::last_step_stats().donated_buffers, 1);
  EXPECT_EQ(counter("DeviceAllocation"), 0);
  std::vector<double> want(pv.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = pv[i] - 0.1 * gv[i];
  expect_close(p.to_vector<double>(), want, kF32);
}

TEST_F(GraphExecutorTest, CompileCacheEvictsBeyondItsSize) {
  const Restore restore([size = lt::compile_cache_size()] { lt::set_compile_cache_size(size); });
  lt::set_compile_cache_size(2);
  std::vector<Tensor> ts;
  for (const lt::Shape& shape : {lt::Shape{1000}, lt::Shape{100, 20}, lt::Shape{10, 10, 30}}) {
    ts.push_back(lt::from_vector(values(shape.numel()), shape));
  }
  settle();

  // Three graphs (of three ranks) through a cache of two: the first is gone when it comes
  // back.
  for (int i : {0, 1, 2, 0}) {
    ts[i].add_(1.0);
    lt::mark_step();
  }
  lt::wait_device_ops();
  EXPECT_EQ(counter("UncachedCompile"), 4);
  EXPECT_EQ(counter("CachedCompile"), 0);
  EXPECT_LE(lt::compile_cache_entries(), 2u);

  // The most recent graph is still cached.
  ts[0].add_(1.0);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(counter("CachedCompile"), 1);
}

TEST_F(GraphExecutorTest, CompilesPerStepHasOneEntryPerLaunchingStep) {
  const int64_t n = 1000;
  const int64_t m = 3000;
  Tensor x = lt::from_vector(values(n), {n});
  Tensor y = lt::from_vector(values(m), {m});
  settle();
  const size_t before = lt::compiles_per_step().size();

  x.add_(1.0);
  lt::mark_step();  // a miss
  x.add_(1.0);
  lt::mark_step();  // a hit
  lt::mark_step();  // launches nothing
  y.mul_(2.0);
  lt::mark_step();  // a new graph
  lt::wait_device_ops();
  const std::vector<int64_t> per_step = lt::compiles_per_step();
  ASSERT_EQ(per_step.size(), before + 3);
  EXPECT_EQ(std::vector<int64_t>(per_step.end() - 3, per_step.end()),
            (std::vector<int64_t>{1, 0, 1}));
}

}  // namespace
