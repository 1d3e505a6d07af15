#pragma once
// Helpers shared by the test files.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "lazytensor/lazytensor.h"

namespace lt_test {

struct Tol {
  double rtol;
  double atol;
};

// One failure naming the first mismatch and the count, rather than one failure per element.
inline void expect_close(const std::vector<double>& got, const std::vector<double>& want, Tol tol) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    // Written so that a NaN on either side is a mismatch; equal infinities match, as in
    // NumPy's assert_allclose (their difference is NaN).
    if (got[i] == want[i]) continue;
    if (std::abs(got[i] - want[i]) <= tol.atol + tol.rtol * std::abs(want[i])) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << bad << " mismatches; first at " << first << ": got " << got[first]
                     << ", want " << want[first];
}

inline std::vector<double> widen(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

inline std::vector<double> elementwise(const std::vector<double>& values,
                                       const std::function<double(double)>& f) {
  std::vector<double> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), f);
  return out;
}

inline int64_t counter(const char* name) {
  return lt::metrics::counter_value(name);
}

// The message of the lt::Error that `op` throws; a failure if it throws something else or
// nothing.
inline std::string error_message(const std::function<void()>& op) {
  try {
    op();
  } catch (const lt::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw something other than lt::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

inline void expect_mentions(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << part << "\" not in: " << message;
  }
}

// Runs `restore` when a test ends, pass or fail: the settings it changes are process-wide.
class Restore {
 public:
  explicit Restore(std::function<void()> restore) : restore_(std::move(restore)) {}
  ~Restore() { restore_(); }
  Restore(const Restore&) = delete;
  Restore& operator=(const Restore&) = delete;

 private:
  std::function<void()> restore_;
};

// Sets a scalar policy for one scope: the setting is process-wide.
class PolicyScope {
 public:
  explicit PolicyScope(lt::ScalarPolicy policy) : saved_(lt::scalar_policy()) {
    lt::set_scalar_policy(policy);
  }
  ~PolicyScope() { lt::set_scalar_policy(saved_); }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;

 private:
  lt::ScalarPolicy saved_;
};

// A fresh directory, removed with everything in it when the scope ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "lazytensor-test-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  // The names of the files in the directory.
  std::set<std::string> files() const {
    std::set<std::string> out;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      out.insert(entry.path().filename());
    }
    return out;
  }

 private:
  std::filesystem::path path_;
};

// Runs kernels in the interpreter, which compiles in no time (the tests that need native code
// ask for it). A file registers it with
//   [[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();
class InterpreterEnvironment : public testing::Environment {
 public:
  void SetUp() override { lt::set_kernel_compiler("interpreter"); }
};
inline testing::Environment* use_interpreter() {
  return testing::AddGlobalTestEnvironment(new InterpreterEnvironment);
}

// Finishes everything launched so far and zeroes the counters, so that a test counts only what
// follows.
inline void settle() {
  lt::mark_step();
  lt::wait_device_ops();
  lt::metrics::reset();
}

// Waits for everything launched so far, for at most `seconds`. A step that never finishes must
// fail the test rather than hang the suite; the stuck device thread would block every later
// test in this process, so the process ends here.
inline void finish_or_exit(double seconds) {
  const lt::DeviceEvent finished = lt::record_event();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!finished.done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "the device did not finish the step within " << seconds << " s";
      std::fflush(stdout);
      std::_Exit(EXIT_FAILURE);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  lt::wait_device_ops();  // reports a failed step
}

// A fresh seed per test, attached to every failure message; LT_TEST_SEED=<seed> replays one.
class Seeded {
 protected:
  // Values in [lo, hi), representable in f32 so that expected values start from exactly what
  // the tensor holds.
  std::vector<float> values(int64_t n, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<float> out(static_cast<size_t>(n));
    for (float& v : out) {
      do {  // rounding to f32 can reach hi itself
        v = static_cast<float>(dist(gen_));
      } while (static_cast<double>(v) >= hi);
    }
    return out;
  }
  // A value in [lo, hi).
  double scalar(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(gen_);
  }
  uint64_t next_seed() { return gen_(); }
  uint32_t seed() const { return seed_; }

 private:
  static uint32_t draw_seed() {
    const char* fixed = std::getenv("LT_TEST_SEED");
    return fixed != nullptr ? static_cast<uint32_t>(std::stoul(fixed)) : std::random_device{}();
  }

  const uint32_t seed_ = draw_seed();
  std::mt19937 gen_{seed_};
  testing::ScopedTrace trace_{__FILE__, __LINE__, "LT_TEST_SEED=" + std::to_string(seed_)};
};

// A seeded test that starts with nothing launched or pending, with the counters at zero and with
// no compiled graph or kernel in memory: its first step compiles as a process's first step does,
// whatever ran before it (other tests, or an earlier --gtest_repeat round).
class EngineTest : public testing::Test, protected Seeded {
 protected:
  void SetUp() override {
    settle();
    lt::clear_compile_caches();
  }
};

}  // namespace lt_test
