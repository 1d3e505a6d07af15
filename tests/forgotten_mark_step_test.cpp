// A training loop that reads its loss every step but never calls mark_step() keeps its
// parameters pending, so every read runs all earlier steps again and each step costs more than
// the last. It is warned once, by its fourth step; long graphs and gradient accumulation, which
// read nothing twice, are not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::Tensor;

class ForgottenMarkStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lt::mark_step();
    lt::wait_device_ops();
    lt::set_graph_warn_nodes(1'000'000);  // lets the warnings be given again
  }
  void TearDown() override {
    lt::mark_step();
    lt::wait_device_ops();
  }
};

struct Regression {
  Tensor w = lt::randn({8, 1}, 7).mul_(0.3).requires_grad_();
  Tensor b = lt::zeros({1}).requires_grad_();
  Tensor loss(const Tensor& x, const Tensor& y) const {
    const Tensor d = lt::matmul(x, w) + b - y;
    return (d * d).mean();
  }
};

int occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST_F(ForgottenMarkStepTest, ALoopThatReadsButNeverCutsIsWarnedOnceByItsFourthStep) {
  Regression model;
  lt::optim::SGD sgd({model.w, model.b}, {});
  const Tensor x = lt::randn({16, 8}, 1), y = lt::randn({16, 1}, 2);
  int warned_at = -1;
  std::string all;
  for (int step = 1; step <= 10; ++step) {
    testing::internal::CaptureStderr();
    sgd.zero_grad();
    const Tensor loss = model.loss(x, y);
    loss.backward();
    sgd.step();
    loss.item();  // no mark_step()
    const std::string said = testing::internal::GetCapturedStderr();
    if (warned_at < 0 && !said.empty()) warned_at = step;
    all += said;
  }
  EXPECT_GE(warned_at, 2);
  EXPECT_LE(warned_at, 4);
  lt_test::expect_mentions(all, {"warning", "lt::mark_step()", "runs all earlier steps again",
                                 "each step costs more than the last"});
  EXPECT_EQ(occurrences(all, "warning"), 1) << all;
}

TEST_F(ForgottenMarkStepTest, LongGraphsAndGradientAccumulationAreNotWarned) {
  testing::internal::CaptureStderr();
  // A 20,000-op chain, read once.
  Tensor chain = lt::ones({4});
  for (int i = 0; i < 20'000; ++i) chain = chain.mul(1.00001);
  chain.to_vector();
  // Gradient accumulation over 8 micro-batches, each loss read, one cut per optimizer step.
  Regression model;
  lt::optim::SGD sgd({model.w, model.b}, {});
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    for (int micro = 0; micro < 8; ++micro) {
      const Tensor x = lt::randn({4, 8}, 100 + micro), y = lt::randn({4, 1}, 200 + micro);
      const Tensor loss = model.loss(x, y) / 8.0;
      loss.backward();
      loss.item();
    }
    sgd.step();
    lt::mark_step();
  }
  // Reading a value traced before an earlier read runs that read's ops again, once: no warning.
  const Tensor h = lt::ones({4}).mul(3.0);
  const Tensor g = h.add(1.0);
  h.to_vector();
  g.to_vector();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
