// The IR: nodes of every length of chain are released and walked without recursion, and a
// graph that nobody cuts is reported and cut before it eats the machine.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/node.h"
#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::Tensor;
using lt_test::counter;
using lt_test::Restore;

// Long enough that one stack frame per node overflowed an 8 MiB stack (it crashed at about
// 100,000 before nodes were released iteratively). Sanitizer builds are slower per node.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kLongChain = 300'000;
#else
constexpr int kLongChain = 1'000'000;
#endif

class IrTest : public lt_test::EngineTest {
 protected:
  void SetUp() override {
    lt_test::EngineTest::SetUp();
    lt::set_auto_cut_nodes(0);  // these tests want the whole chain in one graph
    lt::set_graph_warn_nodes(0);
  }
  // The defaults of runtime.h (the tests' environment sets neither variable).
  void TearDown() override {
    lt::set_auto_cut_nodes(4'000'000);
    lt::set_graph_warn_nodes(1'000'000);
  }
};

TEST_F(IrTest, AMillionOpChainIsReleasedWithoutRecursion) {
  const int64_t before = lt::live_ir_nodes();
  {
    Tensor x = lt::from_vector(values(3), {3});
    for (int i = 0; i < kLongChain; ++i) x = x.add(1.0);
    EXPECT_GE(lt::live_ir_nodes() - before, kLongChain);
  }  // the whole chain dies here
  EXPECT_EQ(lt::live_ir_nodes(), before);
}

TEST_F(IrTest, AMillionOpChainIsComputedAndRead) {
  const std::vector<float> x0 = values(5);
  Tensor x = lt::from_vector(x0, {5});
  for (int i = 0; i < kLongChain; ++i) x = x.add(1.0);
  const std::vector<double> got = x.to_vector<double>();
  std::vector<double> want;
  for (float v : x0) {
    float acc = v;  // the engine adds in f32, one rounding per op, as the kernels do
    for (int i = 0; i < kLongChain; ++i) acc += 1.0f;
    want.push_back(acc);
  }
  lt_test::expect_close(got, want, {0, 0});
  // Kernels stay short however long the chain: the graph became many kernels.
  EXPECT_GE(lt::last_step_stats().kernels, kLongChain / 512);
}

TEST_F(IrTest, AWideAndDeepGraphIsReleased) {
  const int64_t before = lt::live_ir_nodes();
  {
    std::vector<Tensor> xs;
    for (int t = 0; t < 4; ++t) xs.push_back(lt::from_vector(values(2), {2}));
    for (int i = 0; i < kLongChain / 4; ++i) {
      Tensor& x = xs[i % 4];
      x = x.mul(xs[(i + 1) % 4]).add(0.5);  // chains that share operands
    }
  }
  EXPECT_EQ(lt::live_ir_nodes(), before);
}

// A loop that forgets mark_step(): warned once, on stderr, with what to do.
TEST_F(IrTest, AGraphThatGrowsWithoutCutsIsWarnedAboutOnce) {
  lt::set_graph_warn_nodes(static_cast<size_t>(lt::live_ir_nodes()) + 1000);
  Tensor x = lt::from_vector(values(4), {4});
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5000; ++i) x = x.mul(1.0001);
  const std::string first = testing::internal::GetCapturedStderr();
  lt_test::expect_mentions(first, {"warning", "IR nodes", "lt::mark_step()", "LT_AUTO_CUT_NODES"});
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5000; ++i) x = x.mul(1.0001);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "") << "warned twice";
  lt::mark_step();
}

// Past the automatic cut the graph is cut as mark_step() would: values unchanged, memory
// bounded.
TEST_F(IrTest, AutomaticCutsBoundTheGraphAndKeepValues) {
  const int64_t before = lt::live_ir_nodes();
  lt::set_auto_cut_nodes(static_cast<size_t>(before) + 2000);
  const std::vector<float> x0 = values(6);
  Tensor x = lt::from_vector(x0, {6});
  int64_t most = 0;
  const int64_t steps = counter("MarkStep");
  for (int i = 0; i < 20'000; ++i) {
    x = x.mul(0.5).add(0.25);
    most = std::max(most, lt::live_ir_nodes() - before);
  }
  EXPECT_GE(counter("MarkStep") - steps, 9);
  EXPECT_LE(most, 2100);
  std::vector<double> want;
  for (float v : x0) {
    float acc = v;
    for (int i = 0; i < 20'000; ++i) acc = acc * 0.5f + 0.25f;
    want.push_back(acc);
  }
  lt_test::expect_close(x.to_vector<double>(), want, {0, 0});
}

TEST(IrNodeTest, AttributesAndDepthAreRecorded) {
  using lt::ir::OpKind;
  const auto a = lt::ir::make_scalar_node(OpKind::Constant, lt::DType::f32, 2.5);
  const auto b = lt::ir::make_node(OpKind::Neg, lt::DType::f32, lt::Shape{}, {a});
  const auto c = lt::ir::make_node(OpKind::Add, lt::DType::f32, lt::Shape{}, {b, a});
  const auto r = lt::ir::make_reduction(OpKind::Sum, c, 0b1, true, lt::Shape{});
  EXPECT_EQ(a->depth, 0u);
  EXPECT_EQ(c->depth, 2u);
  EXPECT_EQ(r->depth, 3u);
  EXPECT_EQ(r->reduce_mask(), 1u);
  EXPECT_TRUE(r->keepdim());
  ASSERT_EQ(a->attrs.size(), 1u);  // a constant's value is structure
  EXPECT_EQ(c->num_operands(), 2);
}

// The reference walks the graph in its topological order, not one stack frame per node, so a
// chain that overflowed the stack when it recursed evaluates; and it launches nothing.
TEST_F(IrTest, TheReferenceEvaluatesALongChainWithoutRecursion) {
  constexpr int kSteps = 100'000;  // two ops each
  const std::vector<float> x0 = values(4);
  Tensor x = lt::from_vector(x0, {4});
  for (int i = 0; i < kSteps; ++i) x = x.mul(0.5).add(0.25);
  const int64_t steps = counter("MarkStep");
  const std::vector<double> got = lt::reference::evaluate(x);
  EXPECT_EQ(counter("MarkStep"), steps);
  std::vector<double> want;
  for (float v : x0) {
    double acc = v;  // the reference computes f32 ops in double, unrounded
    for (int i = 0; i < kSteps; ++i) acc = acc * 0.5 + 0.25;
    want.push_back(acc);
  }
  lt_test::expect_close(got, want, {0, 0});
}

}  // namespace
