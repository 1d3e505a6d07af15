#pragma once
// Helpers shared by the test files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
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
    // Written so that a NaN on either side is a mismatch.
    if (std::abs(got[i] - want[i]) <= tol.atol + tol.rtol * std::abs(want[i])) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << bad << " mismatches; first at " << first << ": got " << got[first]
                     << ", want " << want[first];
}

inline std::vector<double> widen(const std::vector<float>& values) {
  return {values.begin(), values.end()};
}

inline int64_t counter(const char* name) {
  return lt::metrics::counter_value(name);
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

}  // namespace lt_test
