// Device faults and bounded memory: failures reach the host as lt::Error at the next read or
// wait, name the step, and leave everything else (and later steps) working.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backend/fault_injection.h"
#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt_test::error_message;

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

class ReliabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lt::wait_device_ops();
    lt::metrics::reset();
  }
  void TearDown() override { lt::set_device_memory_limit(0); }
};

TEST_F(ReliabilityTest, AnImpossibleAllocationFailsAtTraceTime) {
  const std::string message = error_message([] { lt::zeros({int64_t{1} << 40}); });
  EXPECT_NE(message.find("zeros"), std::string::npos) << message;
  EXPECT_NE(message.find("4398046511104 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("free"), std::string::npos) << message;
  // The engine goes on.
  lt::Tensor t = lt::ones({4}).mul(2.0);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{2, 2, 2, 2}));
}

TEST_F(ReliabilityTest, BroadcastBeyondTheDeviceFailsAtTraceTimeAndKeepsTheOperands) {
  lt::Tensor a = lt::ones({1 << 20, 1});
  lt::Tensor b = lt::ones({1, 1 << 20});
  const std::string message = error_message([&] { a.add_(b); });
  EXPECT_NE(message.find("add_"), std::string::npos) << message;
  EXPECT_EQ(a.shape(), lt::Shape({1 << 20, 1}));
  EXPECT_EQ(a.sum().item(), double(1 << 20));
}

TEST_F(ReliabilityTest, AnAllocationFailureInAStepFailsItsNewValuesAndKeepsTheRest) {
  lt::Tensor kept = lt::from_vector(std::vector<float>{1, 2, 3}, {3});
  lt::Tensor updated = lt::from_vector(std::vector<float>{4, 5, 6}, {3});
  lt::mark_step();
  lt::wait_device_ops();
  const int64_t in_use = lt::device_memory_stats().bytes_in_use;
  // Each result fits on its own; both do not.
  lt::set_device_memory_limit(static_cast<size_t>(in_use + (6 << 20)));
  lt::Tensor x = lt::zeros({1 << 20});
  lt::Tensor y = lt::ones({1 << 20});
  updated.mul_(10.0);
  // Known on the host: mark_step raises it, and nothing is left to report later.
  const std::string raised = error_message([] { lt::mark_step(); });
  EXPECT_NE(raised.find("mark_step"), std::string::npos) << raised;
  EXPECT_NE(raised.find("step"), std::string::npos) << raised;
  EXPECT_NE(raised.find("cannot allocate"), std::string::npos) << raised;
  EXPECT_NO_THROW(lt::wait_device_ops());
  const std::string read = error_message([&] { y.to_vector(); });
  EXPECT_NE(read.find("cannot allocate"), std::string::npos) << read;
  EXPECT_EQ(updated.to_vector(), (std::vector<float>{4, 5, 6}));

  lt::set_device_memory_limit(0);
  EXPECT_EQ(kept.to_vector(), (std::vector<float>{1, 2, 3}));
  lt::Tensor later = kept.mul(2.0);
  lt::mark_step();
  EXPECT_EQ(later.to_vector(), (std::vector<float>{2, 4, 6}));
  EXPECT_NO_THROW(lt::wait_device_ops());
}

TEST_F(ReliabilityTest, AKernelFailureFailsItsNewValuesAndCommitsNothing) {
  lt::Tensor p = lt::from_vector(std::vector<float>{1, 2}, {2});
  lt::Tensor q = lt::from_vector(std::vector<float>{5, 6}, {2});
  lt::mark_step();
  lt::wait_device_ops();
  const int64_t step = lt::last_step_stats().step + 1;
  lt::backend::inject_execution_failures(1);
  p.add_(1.0);
  lt::Tensor fresh = q.mul(3.0);
  lt::mark_step();
  const std::string waited = error_message([] { lt::wait_device_ops(); });
  EXPECT_NE(waited.find("step " + std::to_string(step)), std::string::npos) << waited;
  // Updated in place: the value from before the step.
  EXPECT_EQ(p.to_vector(), (std::vector<float>{1, 2}));
  const std::string read = error_message([&] { fresh.to_vector(); });
  EXPECT_NE(read.find("injected kernel failure"), std::string::npos) << read;
  // A value computed from a failed one fails too, saying why.
  lt::Tensor derived = fresh.mul(2.0);
  const std::string derived_error = error_message([&] { derived.to_vector(); });
  EXPECT_NE(derived_error.find("input failed"), std::string::npos) << derived_error;
  // Unaffected tensors and later steps work.
  EXPECT_EQ(q.to_vector(), (std::vector<float>{5, 6}));
  q.mul_(2.0);
  lt::mark_step();
  EXPECT_EQ(q.to_vector(), (std::vector<float>{10, 12}));
  // Each failure is raised once: the reads raised both, so waits are clean.
  EXPECT_NO_THROW(lt::wait_device_ops());
}

// The soak: AdamW on the tiny model for many steps keeps device memory and RSS flat after the
// warm-up. LT_SOAK_STEPS sets the count (the sanitizer builds run fewer).
TEST_F(ReliabilityTest, SoakKeepsMemoryFlat) {
  const char* env = std::getenv("LT_SOAK_STEPS");
  const int steps = env ? std::atoi(env) : 10000;
  const int warmup = std::max(10, steps / 10);
  lt::optim::ParamGroup<lt::optim::AdamWOptions> group;
  group.options.weight_decay = 0.01;
  uint64_t seed = 1;
  for (const auto& spec : lt::models::parameter_shapes("tiny")) {
    group.params.push_back(lt::randn(spec.shape, seed++).mul_(0.02));
    group.grads.push_back(lt::randn(spec.shape, seed++).mul_(1e-3));
  }
  lt::optim::AdamW adamw({group});
  auto schedule = lt::optim::linear_schedule(100, steps);
  int64_t device_after_warmup = 0, rss_after_warmup = 0;
  for (int step = 0; step < steps; ++step) {
    adamw.set_lr(schedule->lr(1e-3, step));
    adamw.step();
    lt::mark_step();
    if (step + 1 == warmup) {
      lt::wait_device_ops();
      device_after_warmup = lt::device_memory_stats().bytes_in_use;
      rss_after_warmup = resident_bytes();
    }
  }
  lt::wait_device_ops();
  const int64_t device_end = lt::device_memory_stats().bytes_in_use;
  const int64_t rss_end = resident_bytes();
  std::printf("soak: %d steps; device memory %lld -> %lld bytes; RSS %lld -> %lld bytes\n", steps,
              static_cast<long long>(device_after_warmup), static_cast<long long>(device_end),
              static_cast<long long>(rss_after_warmup), static_cast<long long>(rss_end));
  EXPECT_EQ(device_end, device_after_warmup);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Sanitizer runtimes keep growing histories and quarantines of their own: RSS says nothing.
  EXPECT_LT(static_cast<double>(rss_end), 1.01 * static_cast<double>(rss_after_warmup));
#endif
  EXPECT_LE(lt::compile_cache_entries(), lt::compile_cache_size());
}

TEST_F(ReliabilityTest, CachesStayWithinTheirBounds) {
  const size_t previous = lt::compile_cache_size();
  lt::set_compile_cache_size(3);
  for (int n = 1; n <= 10; ++n) {
    lt::Tensor t = lt::ones({n}).add(1.0);
    lt::mark_step();
  }
  EXPECT_LE(lt::compile_cache_entries(), 3u);
  lt::set_compile_cache_size(previous);

  const size_t data_previous = lt::data_cache_size();
  lt::set_scalar_policy(lt::ScalarPolicy::cached);
  lt::set_data_cache_size(4);
  lt::Tensor t = lt::ones({2});
  for (int v = 2; v < 20; ++v) t.mul_(1.0 + v * 1e-3);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_EQ(lt::metrics::counter_value("DeviceDataCacheMiss"), 18);
  // Only the last four values are still cached: the first one misses again.
  t.mul_(1.0 + 2 * 1e-3);
  EXPECT_EQ(lt::metrics::counter_value("DeviceDataCacheMiss"), 19);
  lt::set_scalar_policy(lt::ScalarPolicy::argument);
  lt::set_data_cache_size(data_previous);
}

}  // namespace
