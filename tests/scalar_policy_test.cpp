// The four scalar policies (docs/runtime.md, "Scalar policies") observed through the metrics
// counters: what a plain number passed to an op costs in transfers and compiles under each, and
// that each gives the right numbers.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_support.h"

namespace {

using lt_test::counter;
using lt_test::expect_close;
using lt_test::finish_or_exit;
using lt_test::settle;
using lt_test::Tol;
using lt_test::widen;

using lt::ScalarPolicy;
using lt::Tensor;
using Vec = std::vector<double>;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

constexpr Tol kF32{1e-5, 1e-5};

int64_t transfers_to_device() {
  return counter("TransferToDeviceSync") + counter("TransferToDeviceAsync");
}

// A value no earlier test in this process has passed (never 0 or +-1, and distinct in f32), so
// that the process-wide scalar cache has never seen it.
double fresh_value() {
  static int next = 0;
  return 0.123 + 1e-5 * ++next;
}

// Every test updates p in place with p.addcdiv_(a, b, value), one step per value.
class ScalarPolicyTest : public lt_test::EngineTest {
 protected:
  void SetUp() override {
    lt_test::EngineTest::SetUp();
    const int64_t n = 5001;
    const std::vector<float> pv = values(n);
    av_ = widen(values(n));
    bv_ = widen(values(n, 0.5, 2));
    p_ = lt::from_vector(pv, {n});
    a_ = lt::from_vector(av_, {n});
    b_ = lt::from_vector(bv_, {n});
    want_ = widen(pv);
    settle();
  }

  // The settings are process-wide: put them back for later tests (argument is the default).
  void TearDown() override {
    lt::set_scalar_policy(ScalarPolicy::argument);
    lt::set_special_scalars(special_scalars_);
    lt::set_data_cache_size(data_cache_size_);
  }

  void step(double value) {
    p_.addcdiv_(a_, b_, value);
    lt::mark_step();
    for (size_t i = 0; i < want_.size(); ++i) want_[i] += value * av_[i] / bv_[i];
  }

  Vec p_values() {
    finish_or_exit(120);
    return p_.to_vector<double>();
  }

  Tensor p_, a_, b_;
  Vec av_, bv_, want_;

 private:
  const bool special_scalars_ = lt::special_scalars();
  const size_t data_cache_size_ = lt::data_cache_size();
};

// The default: whatever the value, even the ones other policies special-case, nothing is
// uploaded and nothing recompiles.
TEST_F(ScalarPolicyTest, ArgumentNewValuesNeverTransferOrCompile) {
  lt::set_scalar_policy(ScalarPolicy::argument);
  step(0.5);  // compiles the graph
  p_values();
  lt::metrics::reset();

  const Vec finite = {0.0,  1.0, -1.0, 0.25, -0.75, 2.5,  1e-3, -1e-3, 3.0, -2.0,
                      0.75, 0.1, -0.1, 1.5,  0.3,   -0.3, 0.9,  1e-6,  -4.0};
  for (double value : finite) step(value);
  expect_close(p_values(), want_, kF32);
  EXPECT_GE(lt::last_step_stats().scalar_args, 1);

  step(std::numeric_limits<double>::quiet_NaN());
  const Vec got = p_values();
  EXPECT_EQ(std::count_if(got.begin(), got.end(), [](double v) { return std::isnan(v); }),
            static_cast<std::ptrdiff_t>(got.size()));

  EXPECT_EQ(counter("MarkStep"), 20);
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  EXPECT_EQ(counter("TransferToDeviceAsync"), 0);
  EXPECT_EQ(counter("UncachedCompile"), 0);
  EXPECT_EQ(counter("CachedCompile"), 20);
}

TEST_F(ScalarPolicyTest, CachedRepeatedValueTransfersNothing) {
  lt::set_scalar_policy(ScalarPolicy::cached);
  lt::set_data_cache_size(16);
  const double value = fresh_value();
  step(value);
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 1);
  EXPECT_EQ(counter("TransferToDeviceSync"), 1);

  for (int k = 1; k <= 5; ++k) {
    step(value);
    EXPECT_EQ(counter("DeviceDataCacheHit"), k);
  }
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 1);
  EXPECT_EQ(counter("TransferToDeviceSync"), 1);
  EXPECT_EQ(counter("UncachedCompile"), 1);
  expect_close(p_values(), want_, kF32);
}

TEST_F(ScalarPolicyTest, CachedNewValueTransfersOnce) {
  lt::set_scalar_policy(ScalarPolicy::cached);
  lt::set_data_cache_size(16);
  for (int k = 1; k <= 5; ++k) {
    step(fresh_value());
    EXPECT_EQ(counter("DeviceDataCacheMiss"), k);
    EXPECT_EQ(counter("TransferToDeviceSync"), k);
  }
  EXPECT_EQ(counter("DeviceDataCacheHit"), 0);
  // A scalar as device data is a graph input: new values never recompile.
  EXPECT_EQ(counter("UncachedCompile"), 1);
  expect_close(p_values(), want_, kF32);
}

TEST_F(ScalarPolicyTest, CachedEvictsAtItsBound) {
  lt::set_scalar_policy(ScalarPolicy::cached);
  lt::set_data_cache_size(2);
  const double a = fresh_value();
  const double b = fresh_value();
  const double c = fresh_value();
  for (double value : {a, b, c}) step(value);
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 3);

  step(a);  // evicted by c
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 4);
  EXPECT_EQ(counter("DeviceDataCacheHit"), 0);
  EXPECT_EQ(counter("TransferToDeviceSync"), 4);
  expect_close(p_values(), want_, kF32);
}

// Least recently used, not first in: a value used again outlives one used once.
TEST_F(ScalarPolicyTest, CachedEvictsTheLeastRecentlyUsed) {
  lt::set_scalar_policy(ScalarPolicy::cached);
  lt::set_data_cache_size(2);
  const double a = fresh_value();
  const double b = fresh_value();
  const double c = fresh_value();
  for (double value : {a, b, a, c}) step(value);  // c evicts b
  EXPECT_EQ(counter("DeviceDataCacheHit"), 1);
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 3);

  step(a);
  EXPECT_EQ(counter("DeviceDataCacheHit"), 2);
  step(b);
  EXPECT_EQ(counter("DeviceDataCacheMiss"), 4);
  expect_close(p_values(), want_, kF32);
}

// torch-xla 1.13's regression: every use of a scalar is one synchronous upload, except the
// special values 0 and +-1, which become graph constants.
TEST_F(ScalarPolicyTest, UncachedTransfersOncePerScalarUse) {
  lt::set_scalar_policy(ScalarPolicy::uncached);
  lt::set_special_scalars(true);
  for (int k = 1; k <= 5; ++k) {
    step(0.1);  // one scalar use per call
    EXPECT_EQ(counter("TransferToDeviceSync"), k);
  }
  EXPECT_EQ(counter("DeviceDataCacheHit") + counter("DeviceDataCacheMiss"), 0);

  for (double special : {1.0, -1.0, 0.0}) step(special);
  EXPECT_EQ(counter("TransferToDeviceSync"), 5);

  lt::set_special_scalars(false);
  step(1.0);
  EXPECT_EQ(counter("TransferToDeviceSync"), 6);
  expect_close(p_values(), want_, kF32);
}

TEST_F(ScalarPolicyTest, ConstantRecompilesPerNewValue) {
  lt::set_scalar_policy(ScalarPolicy::constant);
  step(0.3);
  EXPECT_EQ(counter("UncachedCompile"), 1);
  step(0.7);
  EXPECT_EQ(counter("UncachedCompile"), 2);
  std::string reason = lt::last_recompile_reason();
  std::transform(reason.begin(), reason.end(), reason.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  EXPECT_NE(reason.find("constant"), std::string::npos) << reason;

  step(0.3);
  step(0.7);
  EXPECT_EQ(counter("UncachedCompile"), 2);
  EXPECT_EQ(counter("CachedCompile"), 2);
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  expect_close(p_values(), want_, kF32);
}

// torch-xla's test_cached_addcdiv: repeating addcdiv_ with the same value adds no transfers.
class CachedAddcdivTest : public ScalarPolicyTest,
                          public testing::WithParamInterface<std::string> {};

TEST_P(CachedAddcdivTest, RepeatedValueAddsNoTransfers) {
  const ScalarPolicy policy = lt::parse_scalar_policy(GetParam());
  lt::set_scalar_policy(policy);
  const std::vector<float> v1 = values(3);
  const std::vector<float> v2 = values(3);
  const std::vector<float> v3 = values(3, 0.5, 2);
  Tensor t1 = lt::from_vector(v1, {1, 3});
  const Tensor t2 = lt::from_vector(v2, {1, 3});
  const Tensor t3 = lt::from_vector(v3, {1, 3});
  // torch-xla uses 0.1; a value this process has never cached makes the first count exact.
  const double value = fresh_value();
  t1.addcdiv_(t2, t3, value);
  lt::mark_step();
  // Three tensors, plus the scalar when it is device data.
  const int64_t first = policy == ScalarPolicy::cached ? 4 : 3;
  EXPECT_EQ(transfers_to_device(), first);

  t1.addcdiv_(t2, t3, value);
  t1.addcdiv_(t2, t3, value);
  lt::mark_step();
  EXPECT_EQ(transfers_to_device(), first);

  finish_or_exit(120);
  Vec want = widen(v1);
  for (size_t i = 0; i < want.size(); ++i) want[i] += 3 * value * v2[i] / v3[i];
  expect_close(t1.to_vector<double>(), want, kF32);
}

INSTANTIATE_TEST_SUITE_P(Policies, CachedAddcdivTest, testing::Values("cached", "argument"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
