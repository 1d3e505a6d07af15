// Failures: every invalid call throws lt::Error at trace time, with a message naming the op and
// the offending shapes, dtypes or values, and leaves every tensor as it was and usable.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "test_support.h"

namespace {

using lt_test::error_message;
using lt_test::expect_mentions;

using lt::DType;
using lt::Shape;
using lt::Tensor;

static_assert(std::is_base_of_v<std::runtime_error, lt::Error>);

Tensor make(const std::vector<float>& values, const Shape& shape) {
  return lt::from_vector(values, shape);
}

// A failed op must leave `t` as it was (shape, pending state, values) and usable by a later op.
void expect_unchanged(const Tensor& t, const Shape& shape, bool pending,
                      const std::vector<double>& values) {
  EXPECT_EQ(t.shape().str(), shape.str());
  EXPECT_EQ(t.is_pending(), pending);
  EXPECT_EQ(t.to_vector<double>(), values);
  std::vector<double> next = values;
  for (double& v : next) v += 1;
  EXPECT_EQ((t + 1.0).to_vector<double>(), next);
}

struct Failure {
  std::string op;  // the name the message must contain
  std::function<void()> run;
};

// The torch-xla report: the operands broadcast to [3, 3], which cannot be written into [1, 3].
TEST(ErrorsTest, AddcdivCannotGrowSelf) {
  Tensor t = make({1, 2, 3}, {1, 3});
  const Tensor t1 = make({4, 5, 6}, {3, 1});
  const Tensor t2 = make({2, 4, 8}, {1, 3});
  const bool pending = t.is_pending();

  EXPECT_THROW(t.addcdiv_(t1, t2, 0.1), lt::Error);
  expect_mentions(error_message([&] { t.addcdiv_(t1, t2, 0.1); }),
                  {"addcdiv_", "[1, 3]", "[3, 3]"});
  expect_unchanged(t, {1, 3}, pending, {1, 2, 3});

  t.addcdiv_(t2, t2, 0.5);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, 2.5f, 3.5f}));
}

TEST(ErrorsTest, InPlaceOpsCannotGrowSelf) {
  Tensor self;
  const Tensor column = make({1, 2, 4}, {3, 1});
  const std::vector<Failure> failures = {
      {"add_", [&] { self.add_(column); }},
      {"add_", [&] { self.add_(column, 2.0); }},
      {"sub_", [&] { self.sub_(column); }},
      {"sub_", [&] { self.sub_(column, 2.0); }},
      {"mul_", [&] { self.mul_(column); }},
      {"div_", [&] { self.div_(column); }},
      {"maximum_", [&] { self.maximum_(column); }},
      {"minimum_", [&] { self.minimum_(column); }},
      {"lerp_", [&] { self.lerp_(column, 0.5); }},
      {"lerp_", [&] { self.lerp_(self, column); }},
      {"addcmul_", [&] { self.addcmul_(column, self); }},
      {"addcdiv_", [&] { self.addcdiv_(self, column); }},
  };
  for (const Failure& failure : failures) {
    SCOPED_TRACE(failure.op);
    self = make({1, 2, 3}, {1, 3});
    const bool pending = self.is_pending();
    EXPECT_THROW(failure.run(), lt::Error);
    expect_mentions(error_message(failure.run), {failure.op, "[1, 3]", "[3, 3]"});
    expect_unchanged(self, {1, 3}, pending, {1, 2, 3});
  }
}

TEST(ErrorsTest, CopySourceMustBroadcastToSelf) {
  Tensor self = make({1, 2, 3}, {1, 3});
  const Tensor source = make({4, 5, 6}, {3, 1});
  const bool pending = self.is_pending();
  expect_mentions(error_message([&] { self.copy_(source); }), {"copy_", "[3, 1]", "[1, 3]"});
  expect_unchanged(self, {1, 3}, pending, {1, 2, 3});
}

TEST(ErrorsTest, OperandsMustBroadcast) {
  const Tensor a = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = make(std::vector<float>(12, 1.0f), {4, 3});
  const bool pending = a.is_pending();
  const std::vector<Failure> failures = {
      {"add", [&] { a.add(b); }},
      {"add", [&] { a.add(b, 2.0); }},
      {"sub", [&] { a.sub(b); }},
      {"mul", [&] { a.mul(b); }},
      {"div", [&] { a.div(b); }},
      {"maximum", [&] { a.maximum(b); }},
      {"minimum", [&] { a.minimum(b); }},
      {"lerp", [&] { a.lerp(b, 0.5); }},
      {"lerp", [&] { a.lerp(a, b); }},
      {"addcmul", [&] { a.addcmul(a, b); }},
      {"addcdiv", [&] { a.addcdiv(b, a); }},
      {"add", [&] { lt::add(a, b); }},
      {"sub", [&] { lt::sub(a, b); }},
      {"mul", [&] { lt::mul(a, b); }},
      {"div", [&] { lt::div(a, b); }},
      {"maximum", [&] { lt::maximum(a, b); }},
      {"minimum", [&] { lt::minimum(a, b); }},
  };
  for (const Failure& failure : failures) {
    SCOPED_TRACE(failure.op);
    expect_mentions(error_message(failure.run), {failure.op, "[2, 3]", "[4, 3]"});
  }
  // Operators report the op they stand for, under whatever name: only the shapes are certain.
  const std::vector<std::function<void()>> operators = {
      [&] { (void)(a + b); }, [&] { (void)(a - b); }, [&] { (void)(a * b); },
      [&] { (void)(a / b); }};
  for (const std::function<void()>& op : operators) {
    expect_mentions(error_message(op), {"[2, 3]", "[4, 3]"});
  }
  expect_unchanged(a, {2, 3}, pending, {1, 2, 3, 4, 5, 6});
}

TEST(ErrorsTest, FromVectorNeedsOneValuePerElement) {
  EXPECT_THROW(make(std::vector<float>(5), {2, 3}), lt::Error);
  expect_mentions(error_message([] {
                    make(std::vector<float>(5), {2, 3});
                  }),
                  {"from_vector", "[2, 3]", "5"});
  expect_mentions(error_message([] {
                    lt::from_vector(std::vector<double>(7), Shape{2, 3});
                  }),
                  {"from_vector", "[2, 3]", "7"});
}

TEST(ErrorsTest, NegativeSizes) {
  const std::vector<std::function<void()>> ops = {
      [] {
        lt::from_vector(std::vector<float>{}, Shape{-1, 3});
      },
      [] {
        lt::zeros(Shape{2, -1});
      },
      [] { lt::ones(Shape{-1}); },
      [] { lt::full(Shape{-1}, 1.0); },
      [] { lt::rand(Shape{-1}, 1); },
      [] { lt::randn(Shape{-1}, 1); },
  };
  for (const std::function<void()>& op : ops) {
    EXPECT_THROW(op(), lt::Error);
    expect_mentions(error_message(op), {"-1"});
  }
}

TEST(ErrorsTest, ItemNeedsExactlyOneElement) {
  const Tensor t = make({1, 2}, {2});
  const bool pending = t.is_pending();
  EXPECT_THROW(t.item(), lt::Error);
  expect_mentions(error_message([&] { t.item(); }), {"item", "[2]"});
  expect_unchanged(t, {2}, pending, {1, 2});
}

TEST(ErrorsTest, UndefinedTensors) {
  const Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  Tensor x = make({1, 2, 3}, {3});
  const bool pending = x.is_pending();
  const std::vector<std::function<void()>> ops = {
      [&] { undefined.add(x); },         [&] { undefined.add(1.0); },
      [&] { undefined.neg(); },          [&] { undefined.sum(); },
      [&] { undefined.sum({0}); },       [&] { undefined.to_vector<float>(); },
      [&] { undefined.item(); },         [&] { (void)(undefined + 1.0); },
      [&] { x.add(undefined); },         [&] { lt::mul(x, undefined); },
      [&] { x.add_(undefined); },        [&] { x.copy_(undefined); },
      [&] { x.addcdiv_(undefined, x); }, [] { Tensor().add_(1.0); },
  };
  for (const std::function<void()>& op : ops) EXPECT_THROW(op(), lt::Error);
  expect_mentions(error_message([&] { x.add(undefined); }), {"add"});
  expect_unchanged(x, {3}, pending, {1, 2, 3});
}

TEST(ErrorsTest, ReductionDimsMustBeInRange) {
  const Tensor x = make({1, 2, 3, 4, 5, 6}, {2, 3});
  const bool pending = x.is_pending();
  const std::vector<Failure> failures = {
      {"sum", [&] { x.sum({2}); }},    {"sum", [&] { x.sum({-3}); }},
      {"sum", [&] { x.sum({0, 5}); }}, {"mean", [&] { x.mean({2}, true); }},
      {"max", [&] { x.max({-3}); }},   {"norm", [&] { x.norm({2}); }},
  };
  for (const Failure& failure : failures) {
    SCOPED_TRACE(failure.op);
    EXPECT_THROW(failure.run(), lt::Error);
    expect_mentions(error_message(failure.run), {failure.op, "[2, 3]"});
  }
  expect_unchanged(x, {2, 3}, pending, {1, 2, 3, 4, 5, 6});
}

// As in PyTorch, an in-place op may take a wider operand: the result is cast to self's dtype.
TEST(ErrorsTest, InPlaceTakesAWiderOperand) {
  Tensor a = make({1, 2, 3}, {3});
  const Tensor b = lt::from_vector(std::vector<double>{0.25, 0.5, 1e-9}, {3});
  EXPECT_NO_THROW(a.add_(b));
  EXPECT_STREQ(lt::dtype_name(a.dtype()), lt::dtype_name(DType::f32));
  lt::mark_step();
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.25f, 2.5f, 3.0f}));
}

// A value outside the dtype enum has no kernels; u8 has storage and casts but no arithmetic,
// integers and bool have no mean, and random values only exist in floating dtypes.
TEST(ErrorsTest, DtypesWithoutKernelsOrArithmetic) {
  const auto unknown = static_cast<DType>(42);
  EXPECT_STREQ(lt::dtype_name(unknown), "unknown");
  EXPECT_FALSE(lt::dtype_has_kernels(unknown));
  const Tensor x = make({1, 2}, {2});
  const bool pending = x.is_pending();
  const std::vector<std::function<void()>> factories = {
      [&] { lt::zeros({2}, unknown); }, [&] { lt::ones({2}, unknown); },
      [&] { lt::full({2}, 1.0, unknown); }, [&] { lt::rand({2}, 1, unknown); },
      [&] { lt::randn({2}, 1, unknown); }};
  for (const auto& make_one : factories) expect_mentions(error_message(make_one), {"unknown"});
  expect_mentions(error_message([&] { x.to(unknown); }), {"to", "unknown"});
  for (DType dtype : {DType::i32, DType::i64, DType::boolean}) {
    const std::string name = lt::dtype_name(dtype);
    SCOPED_TRACE(name);
    expect_mentions(error_message([&] { lt::rand({2}, 1, dtype); }), {"rand", name});
    expect_mentions(error_message([&] { lt::randn({2}, 1, dtype); }), {"randn", name});
    const Tensor ints = x.to(dtype);
    expect_mentions(error_message([&] { ints.mean(); }), {"mean", name, "floating"});
  }
  const Tensor bytes = x.to(DType::u8);
  expect_mentions(error_message([&] { bytes.neg(); }), {"neg", "u8", "arithmetic"});
  expect_mentions(error_message([&] { bytes.add(bytes); }), {"add", "u8"});
  expect_unchanged(x, {2}, pending, {1, 2});
}

TEST(ErrorsTest, UnknownScalarPolicy) {
  for (lt::ScalarPolicy policy : {lt::ScalarPolicy::argument, lt::ScalarPolicy::cached,
                                  lt::ScalarPolicy::uncached, lt::ScalarPolicy::constant}) {
    EXPECT_EQ(lt::parse_scalar_policy(lt::scalar_policy_name(policy)), policy);
  }
  EXPECT_STREQ(lt::scalar_policy_name(lt::ScalarPolicy::argument), "argument");
  EXPECT_THROW(lt::parse_scalar_policy("bogus"), lt::Error);
  expect_mentions(error_message([] { lt::parse_scalar_policy("bogus"); }), {"bogus"});
}

// A failure in the middle of a chain keeps what came before it, and leaves nothing behind that
// breaks the next step.
TEST(ErrorsTest, FailureMidChainLeavesTheNextStepWorking) {
  const Tensor x = make({1, 2, 3}, {3});
  const Tensor wrong = make({1, 2, 3, 4}, {4});
  Tensor m = x * 2.0;
  EXPECT_THROW(m.add_(wrong), lt::Error);
  expect_unchanged(m, {3}, true, {2, 4, 6});

  m = x * 2.0;
  EXPECT_THROW(m.mul_(0.5).add_(wrong), lt::Error);  // mul_ applies, add_ fails
  EXPECT_THROW(m.add(wrong), lt::Error);
  const Tensor n = m + 1.0;
  EXPECT_NO_THROW(lt::mark_step());
  EXPECT_NO_THROW(lt::wait_device_ops());
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(n.to_vector<double>(), (std::vector<double>{2, 3, 4}));
  EXPECT_NO_THROW(lt::mark_step());
  EXPECT_NO_THROW(lt::wait_device_ops());
}

}  // namespace
