// Compiles that scale: kernels of bounded length, tiered compilation (the first step runs at
// once on the interpreter; native code takes over when it is ready), parallel native compiles.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::Tensor;
using lt_test::counter;
using lt_test::Restore;

class CompileTest : public lt_test::EngineTest {
 protected:
  // A cold kernel cache: the system compiler really runs.
  void SetUp() override {
    lt_test::EngineTest::SetUp();
    saved_dir_ = lt::kernel_cache_dir();
    lt::set_kernel_cache_dir(cache_.path().string());
  }
  void TearDown() override {
    lt::set_kernel_cache_dir(saved_dir_);
    lt::wait_kernel_compiles();
    lt::set_kernel_compiler("interpreter");
    lt::set_tiered_compilation(true);
    lt::set_max_kernel_ops(512);
  }

 private:
  lt_test::TempDir cache_;
  std::string saved_dir_;
};

// A chain of `ops` random elementwise ops (seeded), and its f32 value on the host.
struct Chain {
  Tensor out;
  std::vector<double> want;
};
Chain chain(const std::vector<float>& x0, int ops, uint64_t seed) {
  Tensor x = lt::from_vector(x0, {static_cast<int64_t>(x0.size())});
  std::vector<float> host = x0;
  std::mt19937_64 gen(seed);
  for (int i = 0; i < ops; ++i) {
    const float c = static_cast<float>(std::uniform_real_distribution<double>(0.5, 1.5)(gen));
    switch (gen() % 3) {
      case 0:
        x = x.mul(c);
        for (float& v : host) v = v * c;
        break;
      case 1:
        x = x.add(c);
        for (float& v : host) v = v + c;
        break;
      default:
        x = x.mul(0.5).add(0.5);  // stays bounded
        for (float& v : host) v = v * 0.5f + 0.5f;
        break;
    }
  }
  return {x, {host.begin(), host.end()}};
}

TEST_F(CompileTest, LongChainsBecomeKernelsOfBoundedLength) {
  lt::set_max_kernel_ops(100);
  Chain c = chain(values(1000), 2000, next_seed());
  lt::mark_step();
  const lt::StepStats stats = lt::last_step_stats();
  EXPECT_GE(stats.kernels, 2000 / 100);
  EXPECT_EQ(stats.launches, stats.kernels);  // each chunk reads the one before
  lt_test::expect_close(c.out.to_vector<double>(), c.want, {1e-6, 1e-6});
}

// Each value passed from one cut of a chain to the next lives only until the next cut has
// read it, so device memory does not grow with the length of the chain.
TEST_F(CompileTest, LongChainsHoldFewTemporariesAtATime) {
  lt::set_max_kernel_ops(20);
  constexpr int64_t kElements = 1 << 18;  // 1 MiB of f32
  const std::vector<float> x0 = values(kElements);
  Tensor x = lt::from_vector(x0, {kElements});
  lt::mark_step();
  lt::wait_device_ops();
  lt::reset_peak_device_memory();
  const int64_t before = lt::device_memory_stats().bytes_in_use;
  for (int i = 0; i < 1000; ++i) x = x.mul(0.5).add(0.5);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_GE(lt::last_step_stats().launches, 2000 / 20);
  // The input, the output and a few temporaries at once; 100 at once before lifetimes.
  EXPECT_LE(lt::device_memory_stats().peak_bytes - before, 4 * kElements * 4);
  const std::vector<double> got = x.to_vector<double>();
  for (int64_t i = 0; i < kElements; i += 4099) {
    float want = x0[i];
    for (int k = 0; k < 1000; ++k) want = want * 0.5f + 0.5f;
    ASSERT_EQ(got[i], want) << i;
  }
}

// A reduction whose producers would make a program longer than the bound reads them from
// memory instead.
TEST_F(CompileTest, ReductionsOfLongChainsAreBoundedToo) {
  lt::set_max_kernel_ops(50);
  Chain c = chain(values(300), 400, next_seed());
  const Tensor total = c.out.sum();
  double want = 0;
  for (double v : c.want) want += v;
  EXPECT_NEAR(total.item(), want, 1e-4 * std::abs(want));
  EXPECT_GE(lt::last_step_stats().kernels, 400 / 50);
}

// The first step of a new graph waits for no compiler: it runs interpreted while the native
// kernels compile in the background, and a later step of the same graph runs native code.
TEST_F(CompileTest, TieredCompilationRunsAtOnceThenSwitchesToNativeCode) {
  lt::set_kernel_compiler("native");
  lt::set_tiered_compilation(true);
  const std::vector<float> x0 = values(4096);
  const uint64_t seed = next_seed();
  Chain first = chain(x0, 700, seed);
  lt::mark_step();
  lt_test::expect_close(first.out.to_vector<double>(), first.want, {1e-6, 1e-6});
  lt::wait_kernel_compiles();
  EXPECT_EQ(counter("NativeCompileFailure"), 0);
  lt::metrics::reset();
  Chain again = chain(x0, 700, seed);  // the same graph: a compile-cache hit
  lt::mark_step();
  lt_test::expect_close(again.out.to_vector<double>(), again.want, {1e-6, 1e-6});
  EXPECT_EQ(counter("UncachedCompile"), 0);
  EXPECT_GT(counter("KernelLaunch"), 1);
  EXPECT_EQ(counter("InterpretedKernelLaunch"), 0) << "native code was ready but not used";
}

// Under tiered compilation a launch of a handful of elements stays on the interpreter (its
// compile would only slow the first step); the same graph at sizes that make it larger gets
// native code, and without tiering everything is compiled.
TEST_F(CompileTest, TinyLaunchesStayInterpretedUntilTheirSizesGrow) {
  lt::set_kernel_compiler("native");
  lt::set_tiered_compilation(true);
  const uint64_t seed = next_seed();
  auto step = [&](int64_t n) {
    const std::vector<float> x0 = values(n);
    Chain c = chain(x0, 30, seed);
    lt::mark_step();
    lt_test::expect_close(c.out.to_vector<double>(), c.want, {1e-6, 1e-6});
  };
  lt::metrics::reset();
  step(8);
  lt::wait_kernel_compiles();
  EXPECT_EQ(counter("KernelCompile") + counter("KernelDiskCacheHit"), 0);
  step(8);
  EXPECT_GT(counter("InterpretedKernelLaunch"), 0);

  lt::metrics::reset();
  step(3000);  // the same graph (sizes are arguments), bound again
  EXPECT_EQ(counter("UncachedCompile"), 0);
  lt::wait_kernel_compiles();
  EXPECT_GT(counter("KernelCompile") + counter("KernelDiskCacheHit"), 0);
  lt::metrics::reset();
  step(3000);
  EXPECT_EQ(counter("InterpretedKernelLaunch"), 0) << "native code was ready but not used";

  lt::set_tiered_compilation(false);
  lt::clear_compile_caches();
  lt::metrics::reset();
  step(8);
  EXPECT_EQ(counter("InterpretedKernelLaunch"), 0);
}

// Without tiering a step waits for its native kernels; distinct programs compile in parallel
// batches, and the values are the same.
TEST_F(CompileTest, UntieredCompilesWaitAndMatch) {
  lt::set_kernel_compiler("native");
  lt::set_tiered_compilation(false);
  std::vector<Chain> chains;
  for (int k = 0; k < 6; ++k) chains.push_back(chain(values(100 + k), 40 + 7 * k, next_seed()));
  lt::mark_step();
  for (Chain& c : chains) lt_test::expect_close(c.out.to_vector<double>(), c.want, {1e-6, 1e-6});
  EXPECT_EQ(counter("InterpretedKernelLaunch"), 0);
  EXPECT_EQ(counter("NativeCompileFailure"), 0);
}

// A compiler that fails leaves kernels on the interpreter: values still right, the setting
// unchanged, the failure counted.
TEST_F(CompileTest, AFailingSystemCompilerLeavesTheInterpreterRunning) {
  const char* saved = std::getenv("LT_CXX");
  const std::string restore_cxx = saved ? saved : "";
  const Restore restore([restore_cxx] {
    if (restore_cxx.empty()) {
      unsetenv("LT_CXX");
    } else {
      setenv("LT_CXX", restore_cxx.c_str(), 1);
    }
  });
  setenv("LT_CXX", "/bin/false", 1);
  lt::set_kernel_compiler("native");
  lt::set_tiered_compilation(false);
  testing::internal::CaptureStderr();
  Chain c = chain(values(50), 13, next_seed());
  lt::mark_step();
  lt_test::expect_close(c.out.to_vector<double>(), c.want, {1e-6, 1e-6});
  testing::internal::GetCapturedStderr();
  EXPECT_GE(counter("NativeCompileFailure"), 1);
  EXPECT_EQ(lt::kernel_compiler(), "native");
}

}  // namespace
