// Differential fuzzing: random programs (every op of the Tensor API, reductions over random dims,
// broadcasting, size-0 and size-1 dims, f32, f64, bf16 and f16 (f16 products refused), in-place
// updates, aliases, dead tensors, reads before mark_step, several steps with tensors carried
// over, every scalar policy; views of every kind, views of views and live views; cat,
// index_select, embedding; comparisons feeding where and masked_fill; argmax; matmul, bmm and
// linear) run on the engine and are compared, tensor by tensor, with lt::reference::evaluate.
// The fixed seeds must draw every kind of view, gather, selection and product, and ops of each
// 16-bit dtype (lt_test::drawn_kinds()).
//
//   LT_FUZZ_SEED=<seed>     replays one program (failures print their seed)
//   LT_FUZZ_FIXED_SEEDS=<n> the first n fixed seeds only (a device whose every graph builds a
//                           program: CTest's OpenCl.fuzz_test)
//   LT_FUZZ_SECONDS=<s>     keeps drawing fresh seeds for that long (make fuzz)
//   LT_COMPILER=native      fuzzes the generated code instead of the interpreter
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "random_program.h"
#include "test_support.h"

namespace {

using lt_test::PolicyScope;

// The fixed seeds: a few seconds in the interpreter on two cores.
constexpr uint64_t kFixedSeeds = 2000;
// Failing seeds reported before giving up: later ones are usually the same bug.
constexpr int kMaxFailures = 3;

// Without LT_COMPILER the interpreter runs, so that a bare run stays fast.
class CompilerEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("LT_COMPILER") == nullptr) lt::set_kernel_compiler("interpreter");
  }
};
[[maybe_unused]] testing::Environment* const kCompiler =
    testing::AddGlobalTestEnvironment(new CompilerEnvironment);

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Failures recorded so far in the running test.
int failures_so_far() {
  const testing::TestResult& result =
      *testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result.total_part_count(); ++i) {
    failed += result.GetTestPartResult(i).failed();
  }
  return failed;
}

constexpr lt::ScalarPolicy kAllPolicies[] = {lt::ScalarPolicy::argument, lt::ScalarPolicy::constant,
                                             lt::ScalarPolicy::cached, lt::ScalarPolicy::uncached};

// Runs one program; true when it passed.
bool run_seed(uint64_t seed) {
  SCOPED_TRACE("LT_FUZZ_SEED=" + std::to_string(seed));
  const int failed_before = failures_so_far();
  std::mt19937_64 rng(seed);
  {
    // Each program runs under one scalar policy, the default half of the time.
    const PolicyScope policy(rng() % 2 ? lt::ScalarPolicy::argument : kAllPolicies[rng() % 4]);
    SCOPED_TRACE(std::string("scalar policy ") + lt::scalar_policy_name(lt::scalar_policy()));
    lt_test::ProgramOptions options;
    options.steps = 1 + static_cast<int>(rng() % 4);
    options.max_ops = 14;
    lt_test::RandomProgram(rng(), options, "LT_FUZZ_SEED=" + std::to_string(seed)).run();
  }
  // Nothing of this program may leak into the next one.
  lt::mark_step();
  lt::wait_device_ops();
  const bool passed = failures_so_far() == failed_before;
  if (!passed) std::cerr << "fuzz: failing seed, replay with LT_FUZZ_SEED=" << seed << "\n";
  return passed;
}

// "kind count, ..." for every kind drawn so far.
std::string drawn_summary() {
  std::ostringstream out;
  for (const auto& [kind, count] : lt_test::drawn_counts()) {
    out << (out.tellp() > 0 ? ", " : "") << kind << " " << count;
  }
  return out.str();
}

TEST(FuzzTest, FixedSeedsMatchTheReference) {
  if (const char* seed = env("LT_FUZZ_SEED")) {
    run_seed(std::stoull(seed));
    return;
  }
  lt_test::drawn_counts().clear();
  const char* some = env("LT_FUZZ_FIXED_SEEDS");
  const uint64_t seeds = some ? std::min<uint64_t>(std::stoull(some), kFixedSeeds) : kFixedSeeds;
  int failures = 0;
  for (uint64_t seed = 1; seed <= seeds && failures < kMaxFailures; ++seed) {
    failures += run_seed(seed) ? 0 : 1;
  }
  // Fewer seeds need not draw every kind.
  if (failures > 0 || seeds < kFixedSeeds) return;
  // Every kind of view, gather, selection and product is tested.
  for (const std::string& kind : lt_test::drawn_kinds()) {
    EXPECT_GT(lt_test::drawn_counts()[kind], 0) << "the fixed seeds never drew: " << kind;
  }
  std::cout << "fuzz: drawn: " << drawn_summary() << "\n";
}

TEST(FuzzTest, FreshSeedsMatchTheReference) {
  const char* seconds = env("LT_FUZZ_SECONDS");
  if (seconds == nullptr || env("LT_FUZZ_SEED") != nullptr) {
    GTEST_SKIP() << "set LT_FUZZ_SECONDS to fuzz with fresh seeds";
  }
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::stod(seconds));
  std::random_device device;
  int programs = 0;
  int failures = 0;
  while (std::chrono::steady_clock::now() < end && failures < kMaxFailures) {
    const uint64_t seed = (uint64_t{device()} << 32) | device();
    failures += run_seed(seed) ? 0 : 1;
    ++programs;
  }
  std::cout << "fuzz: " << programs << " programs, " << failures << " failing\n";
  std::cout << "fuzz: drawn: " << drawn_summary() << "\n";
}

// --- Minimal repros of what fuzzing found, so that a fix is checked without fuzzing. ---

// PyTorch computes addcmul and addcdiv in the type promoted over all three operands: a rank-0
// tensor1 must not let tensor2's f32 decide the type of value * tensor1 * tensor2.
TEST(FuzzFindings, AddcmulWithARankZeroFactorComputesInTheResultType) {
  const float third = 1.0f / 3;
  const lt::Tensor self = lt::zeros({3}, lt::DType::f64);
  const lt::Tensor t1 = lt::from_vector(std::vector<float>{third}, {});
  const lt::Tensor t2 = lt::full({3}, 3.0);
  const lt::Tensor product = self.addcmul(t1, t2, 0.1);
  const lt::Tensor quotient = self.addcdiv(t1, t2, 0.1);
  EXPECT_STREQ(lt::dtype_name(product.dtype()), "f64");
  for (double v : product.to_vector<double>()) EXPECT_NEAR(v, 0.1 * third * 3.0, 1e-15);
  for (double v : quotient.to_vector<double>()) EXPECT_NEAR(v, 0.1 * third / 3.0, 1e-16);
}

// A scalar reaches the kernel at the precision of the op's result under every policy: the
// policies differ in cost, never in values.
TEST(FuzzFindings, LerpWeightKeepsItsPrecisionUnderEveryPolicy) {
  for (lt::ScalarPolicy policy : kAllPolicies) {
    const PolicyScope scope(policy);
    SCOPED_TRACE(lt::scalar_policy_name(policy));
    const lt::Tensor start = lt::zeros({3});
    const lt::Tensor end = lt::ones({3}, lt::DType::f64);
    const lt::Tensor y = start.lerp(end, 0.1);
    EXPECT_STREQ(lt::dtype_name(y.dtype()), "f64");
    for (double v : y.to_vector<double>()) EXPECT_NEAR(v, 0.1, 1e-16);
  }
}

// A scalar of a bf16 or f16 op is rounded to the op's dtype under every policy, as PyTorch casts
// a Python number to the tensor's dtype. Fuzzing found the policies disagreeing: the cached and
// uncached ones uploaded the scalar rounded to f16 while the argument and constant ones kept
// f32, so x.le(0.4881591796875), a threshold between two f16 values, depended on the policy.
// The expected values are PyTorch 2.15's.
TEST(FuzzFindings, HalfPrecisionScalarsRoundAlikeUnderEveryPolicy) {
  for (lt::DType dtype : {lt::DType::bf16, lt::DType::f16}) {
    for (lt::ScalarPolicy policy : kAllPolicies) {
      const PolicyScope scope(policy);
      SCOPED_TRACE(std::string(lt::dtype_name(dtype)) + " " + lt::scalar_policy_name(policy));
      const lt::Tensor x = lt::from_vector(std::vector<float>{1.0078125f}, {1}).to(dtype);
      // 1.0075 rounds to 1.0078125 in both dtypes, but not in f32.
      const double s = 1.0075;
      EXPECT_EQ(x.le(s).to_vector<double>(), std::vector<double>{1});
      EXPECT_EQ(x.lt(s).to_vector<double>(), std::vector<double>{0});
      EXPECT_EQ((x - s).to_vector<double>(), std::vector<double>{0});
      EXPECT_EQ(x.clamp_max(s).to_vector<double>(), std::vector<double>{1.0078125});
      EXPECT_EQ((x * s).to_vector<double>(),
                std::vector<double>{lt_test::round_to(dtype, 1.0078125 * 1.0078125)});
    }
  }
}

}  // namespace
