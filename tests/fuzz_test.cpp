// Differential fuzzing: random programs (every op of the Tensor API, reductions over random dims,
// broadcasting, size-0 and size-1 dims, f32 and f64, in-place updates, aliases, dead tensors,
// reads before mark_step, several steps with tensors carried over, every scalar policy) run on
// the engine and are compared, tensor by tensor, with lt::reference::evaluate.
//
//   LT_FUZZ_SEED=<seed>     replays one program (failures print their seed)
//   LT_FUZZ_SECONDS=<s>     keeps drawing fresh seeds for that long (make fuzz)
//   LT_COMPILER=native      fuzzes the generated code instead of the interpreter
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include "random_program.h"

namespace {

// The fixed seeds, about 10 s in the interpreter on two cores.
constexpr uint64_t kFixedSeeds = 300;
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
  const testing::TestResult& result = *testing::UnitTest::GetInstance()->current_test_info()->result();
  int failed = 0;
  for (int i = 0; i < result.total_part_count(); ++i) failed += result.GetTestPartResult(i).failed();
  return failed;
}

// Runs one program; true when it passed.
bool run_seed(uint64_t seed) {
  SCOPED_TRACE("LT_FUZZ_SEED=" + std::to_string(seed));
  const int failed_before = failures_so_far();
  std::mt19937_64 rng(seed);
  // Each program runs under one scalar policy; the default is the most common.
  static constexpr lt::ScalarPolicy kPolicies[] = {
      lt::ScalarPolicy::argument, lt::ScalarPolicy::argument, lt::ScalarPolicy::argument,
      lt::ScalarPolicy::constant, lt::ScalarPolicy::cached,   lt::ScalarPolicy::uncached};
  const lt::ScalarPolicy policy = lt::scalar_policy();
  lt::set_scalar_policy(kPolicies[rng() % 6]);
  if (std::getenv("LT_NO_RANK0")) lt::set_scalar_policy(lt::ScalarPolicy::argument);
  lt_test::ProgramOptions options;
  options.steps = 1 + static_cast<int>(rng() % 4);
  options.max_ops = 14;
  lt_test::RandomProgram(rng(), options, "LT_FUZZ_SEED=" + std::to_string(seed)).run();
  lt::set_scalar_policy(policy);
  // Nothing of this program may leak into the next one.
  lt::mark_step();
  lt::wait_device_ops();
  const bool passed = failures_so_far() == failed_before;
  if (!passed) std::cerr << "fuzz: failing seed, replay with LT_FUZZ_SEED=" << seed << "\n";
  return passed;
}

TEST(FuzzTest, FixedSeedsMatchTheReference) {
  if (const char* seed = env("LT_FUZZ_SEED")) {
    run_seed(std::stoull(seed));
    return;
  }
  int failures = 0;
  for (uint64_t seed = 1; seed <= kFixedSeeds && failures < kMaxFailures; ++seed) {
    failures += run_seed(seed) ? 0 : 1;
  }
}

TEST(FuzzTest, FreshSeedsMatchTheReference) {
  const char* seconds = env("LT_FUZZ_SECONDS");
  if (seconds == nullptr || env("LT_FUZZ_SEED") != nullptr) {
    GTEST_SKIP() << "set LT_FUZZ_SECONDS to fuzz with fresh seeds";
  }
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::stod(seconds));
  std::random_device device;
  int programs = 0;
  int failures = 0;
  while (std::chrono::steady_clock::now() < end && failures < kMaxFailures) {
    const uint64_t seed = (uint64_t{device()} << 32) | device();
    failures += run_seed(seed) ? 0 : 1;
    ++programs;
  }
  std::cout << "fuzz: " << programs << " programs, " << failures << " failing\n";
}

}  // namespace
