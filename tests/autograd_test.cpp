// Autograd: every differentiable op's traced gradient against central finite differences in
// f64 on fresh random inputs (with broadcasting, non-contiguous views and size-1 dims), the
// engine's API (grad accumulation, lt::grad, NoGradGuard, detach) and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt_test::expect_close;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

using Op = std::function<Tensor(const std::vector<Tensor>&)>;

// One input of a checked op: its shape, the range its random values come from, and whether
// the check differentiates it (class ids and masks are not). A central difference that
// straddles a kink sees the mean of two slopes, so the values are drawn again while one lies
// within kSeparation of a `kinks` point, or, for `distinct` inputs (maxima), of another
// distinct input's value.
struct Input {
  Shape shape;
  double lo = -1, hi = 1;
  bool differentiable = true;
  DType dtype = DType::f64;
  std::vector<double> kinks = {};
  bool distinct = false;
};

constexpr double kSeparation = 1e-3;

bool near_a_kink_or_tie(const std::vector<Input>& inputs,
                        const std::vector<std::vector<double>>& values) {
  std::vector<double> distinct;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (const double v : values[i]) {
      for (const double kink : inputs[i].kinks) {
        if (std::abs(v - kink) < kSeparation) return true;
      }
      if (inputs[i].distinct) distinct.push_back(v);
    }
  }
  std::sort(distinct.begin(), distinct.end());
  for (size_t j = 1; j < distinct.size(); ++j) {
    if (distinct[j] - distinct[j - 1] < kSeparation) return true;
  }
  return false;
}

class GradCheck : public lt_test::EngineTest {
 protected:
  // Checks d/d(input) of sum(op(inputs) * upstream) for every differentiable input, traced by
  // lt::grad, against central differences. `reset` runs before every evaluation (dropout's
  // generator state), so every evaluation computes the same function.
  void check(
      const std::string& name, const Op& op, const std::vector<Input>& inputs,
      const std::function<void()>& reset = [] {}) {
    SCOPED_TRACE(name);
    std::vector<std::vector<double>> values;
    do {
      values.clear();
      for (const Input& in : inputs) {
        std::vector<double> v;
        for (float x : this->values(in.shape.numel(), in.lo, in.hi)) {
          v.push_back(in.dtype == DType::f64 ? x : std::floor(x));
        }
        values.push_back(v);
      }
    } while (near_a_kink_or_tie(inputs, values));
    auto build = [&](const std::vector<std::vector<double>>& vals, bool track) {
      std::vector<Tensor> ts;
      for (size_t i = 0; i < inputs.size(); ++i) {
        Tensor t = lt::from_vector(vals[i], inputs[i].shape).to(inputs[i].dtype);
        if (track && inputs[i].differentiable) t.requires_grad_();
        ts.push_back(t);
      }
      return ts;
    };
    reset();
    std::vector<Tensor> tracked = build(values, true);
    const Tensor out = op(tracked);
    ASSERT_EQ(out.dtype(), DType::f64) << name;
    std::vector<double> upstream;
    for (float x : this->values(out.numel(), -1, 1)) upstream.push_back(x);
    const Tensor weights = lt::from_vector(upstream, out.shape());
    const Tensor loss = (out * weights).sum();
    std::vector<Tensor> wrt;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].differentiable) wrt.push_back(tracked[i]);
    }
    const std::vector<Tensor> grads = lt::grad({loss}, wrt, {}, false, /*allow_unused=*/true);

    auto evaluate = [&](const std::vector<std::vector<double>>& vals) {
      const lt::NoGradGuard no_grad;
      reset();
      return (op(build(vals, false)) * weights).sum().item();
    };
    const double h = 1e-6;
    size_t k = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].differentiable) continue;
      SCOPED_TRACE("input " + std::to_string(i));
      const Tensor& g = grads[k++];
      std::vector<double> analytic(values[i].size(), 0.0);
      if (g.defined()) {
        ASSERT_EQ(g.shape(), inputs[i].shape);
        analytic = g.to_vector<double>();
      }
      std::vector<double> numeric(values[i].size());
      for (size_t e = 0; e < values[i].size(); ++e) {
        std::vector<std::vector<double>> plus = values, minus = values;
        plus[i][e] += h;
        minus[i][e] -= h;
        numeric[e] = (evaluate(plus) - evaluate(minus)) / (2 * h);
      }
      expect_close(analytic, numeric, {1e-5, 1e-6});
    }
  }
};

const Shape kMatrix{3, 4};

TEST_F(GradCheck, UnaryOps) {
  const Input any{kMatrix, -2, 2};
  const Input positive{kMatrix, 0.3, 2};
  auto kinked = [](std::vector<double> kinks) {
    return Input{.shape = kMatrix, .lo = -2, .hi = 2, .kinks = std::move(kinks)};
  };
  check("neg", [](auto& x) { return x[0].neg(); }, {any});
  check("abs", [](auto& x) { return x[0].abs(); }, {kinked({0})});
  check("sqrt", [](auto& x) { return x[0].sqrt(); }, {positive});
  check("rsqrt", [](auto& x) { return x[0].rsqrt(); }, {positive});
  check("exp", [](auto& x) { return x[0].exp(); }, {any});
  check("log", [](auto& x) { return x[0].log(); }, {positive});
  check("tanh", [](auto& x) { return x[0].tanh(); }, {any});
  check("sigmoid", [](auto& x) { return x[0].sigmoid(); }, {any});
  check("relu", [](auto& x) { return x[0].relu(); }, {kinked({0})});
  check("erf", [](auto& x) { return x[0].erf(); }, {any});
  check("sin", [](auto& x) { return x[0].sin(); }, {any});
  check("cos", [](auto& x) { return x[0].cos(); }, {any});
  check("softplus", [](auto& x) { return lt::softplus(x[0]); }, {any});
  // beta * x = threshold at x = 0.5: the derivative jumps there from sigmoid(1) to 1.
  check("softplus_threshold", [](auto& x) { return lt::softplus(x[0], 2.0, 1.0); },
        {kinked({0.5})});
  check("clone", [](auto& x) { return x[0].clone(); }, {any});
  check("pow", [](auto& x) { return x[0].pow(2.7); }, {positive});
  check("neg_scalar_div", [](auto& x) { return 1.5 / x[0]; }, {positive});
  check("clamp", [](auto& x) { return x[0].clamp(-0.5, 0.7); }, {kinked({-0.5, 0.7})});
  check("clamp_min", [](auto& x) { return x[0].clamp_min(0.2); }, {kinked({0.2})});
  check("clamp_max", [](auto& x) { return x[0].clamp_max(-0.1); }, {kinked({-0.1})});
  check("scalar_arith", [](auto& x) { return ((x[0] + 2.0) * 3.0 - 1.0) / 4.0; }, {any});
}

// A cast's gradient is cast back to the input's dtype (finite differences cannot see through
// f32 rounding, so this one is exact instead).
TEST_F(GradCheck, CastGradientComesBackInTheInputDtype) {
  Tensor x = lt::from_vector(std::vector<double>{0.5, -1.25, 2.0}, {3}).requires_grad_();
  (x.to(DType::f32) * 3.0f).sum().backward();
  ASSERT_EQ(x.grad().dtype(), DType::f64);
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3, 3}));
}

TEST_F(GradCheck, BinaryOpsBroadcast) {
  // [3, 1] against [1, 4] (size-1 dims on both sides) and [4] against [3, 4].
  const Input col{Shape{3, 1}}, row{Shape{1, 4}}, vec{Shape{4}, 0.5, 2}, full{kMatrix, 0.5, 2};
  check("add", [](auto& x) { return x[0] + x[1]; }, {col, row});
  check("sub", [](auto& x) { return x[0] - x[1]; }, {col, row});
  check("mul", [](auto& x) { return x[0] * x[1]; }, {col, row});
  check("div", [](auto& x) { return x[0] / x[1]; }, {col, vec});
  check("add_alpha", [](auto& x) { return x[0].add(x[1], -0.3); }, {full, vec});
  check("sub_alpha", [](auto& x) { return x[0].sub(x[1], 1.7); }, {vec, full});
  const Input distinct_col{.shape = Shape{3, 1}, .distinct = true};
  const Input distinct_row{.shape = Shape{1, 4}, .distinct = true};
  check("maximum", [](auto& x) { return x[0].maximum(x[1]); }, {distinct_col, distinct_row});
  check("minimum", [](auto& x) { return x[0].minimum(x[1]); }, {distinct_col, distinct_row});
  check("lerp_scalar", [](auto& x) { return x[0].lerp(x[1], 0.3); }, {col, row});
  check("lerp_tensor", [](auto& x) { return x[0].lerp(x[1], x[2]); }, {col, row, vec});
  check("addcmul", [](auto& x) { return x[0].addcmul(x[1], x[2], 0.4); }, {full, col, row});
  check("addcdiv", [](auto& x) { return x[0].addcdiv(x[1], x[2], -1.3); }, {full, col, vec});
  check("where", [](auto& x) { return lt::where(x[2].gt(0.0), x[0], x[1]); },
        {col, row, Input{kMatrix, -1, 1, false}});
  check("masked_fill", [](auto& x) { return x[0].masked_fill(x[1].gt(0.2), 3.5) * x[0]; },
        {full, Input{Shape{4}, -1, 1, false}});
}

TEST_F(GradCheck, Reductions) {
  const Input x{Shape{2, 3, 4}, -2, 2};
  check("sum_all", [](auto& t) { return t[0].sum(); }, {x});
  check("sum_dims", [](auto& t) { return t[0].sum({0, 2}); }, {x});
  check("sum_keepdim", [](auto& t) { return t[0].sum({1}, true); }, {x});
  check("mean", [](auto& t) { return t[0].mean({-1}); }, {x});
  check("mean_all", [](auto& t) { return t[0].mean(); }, {x});
  const Input distinct{.shape = Shape{2, 3, 4}, .lo = -2, .hi = 2, .distinct = true};
  check("max", [](auto& t) { return t[0].max({1}); }, {distinct});
  check("max_all", [](auto& t) { return t[0].max(); }, {distinct});
  check("norm", [](auto& t) { return t[0].norm({2}, true); }, {x});
  check("var", [](auto& t) { return t[0].var({1}); }, {x});
  check("var_biased", [](auto& t) { return t[0].var({0, 2}, false, true); }, {x});
}

TEST_F(GradCheck, ViewsAndNonContiguousInputs) {
  const Input x{Shape{2, 3, 4}, -2, 2};
  check("reshape", [](auto& t) { return t[0].reshape({4, -1}).exp(); }, {x});
  check("transpose_then_op", [](auto& t) { return t[0].transpose(0, 2).sigmoid(); }, {x});
  check("permute_reshape_copies",
        [](auto& t) {
          return t[0].permute({2, 0, 1}).reshape({8, 3});
        },
        {x});
  check("unsqueeze_squeeze", [](auto& t) { return t[0].unsqueeze(1).squeeze(1).unsqueeze(-1); },
        {x});
  check("expand", [](auto& t) { return t[0].expand({5, 3, 4}) * 2.0; }, {Input{Shape{1, 3, 4}}});
  check("slice_step", [](auto& t) { return t[0].slice(2, 1, 4, 2).tanh(); }, {x});
  check("narrow", [](auto& t) { return t[0].narrow(1, 1, 2); }, {x});
  check("select", [](auto& t) { return t[0].select(0, -1) * t[0].select(0, 0); }, {x});
  check("flatten", [](auto& t) { return t[0].flatten(1).t(); }, {x});
  check("contiguous", [](auto& t) { return t[0].transpose(1, 2).contiguous(); }, {x});
  check("view_of_view", [](auto& t) { return t[0].transpose(0, 1).slice(0, 1, 3).sum({1}); }, {x});
  // A window whose elements repeat (stride 0 and overlapping rows): their gradients add up.
  check("as_strided",
        [](auto& t) {
          return lt::as_strided(t[0], {3, 2, 2}, {2, 0, 5}, 1).exp();
        },
        {x});
  check("as_strided_of_transpose",
        [](auto& t) {
          return lt::as_strided(t[0].transpose(0, 2), {2, 3}, {1, 4}, 2);
        },
        {x});
  check("as_strided_scatter",
        [](auto& t) {
          return lt::as_strided_scatter(t[0], t[1].tanh(), {3, 2}, {4, 2}, 1) * t[0];
        },
        {x, Input{Shape{1, 2}}});
}

TEST_F(GradCheck, GathersAndConcatenation) {
  check("cat",
        [](auto& t) {
          return lt::cat({t[0], t[1].t(), t[0] * 2.0}, 0);
        },
        {Input{Shape{2, 3}}, Input{Shape{3, 1}}});
  check("index_select", [](auto& t) { return t[0].index_select(1, t[1].to(DType::i64)); },
        {Input{Shape{2, 5}}, Input{Shape{6}, 0, 5, false, DType::i64}});
  check("index_add",
        [](auto& t) { return t[0].index_add(0, t[2].to(DType::i64), t[1], -0.7) * t[0]; },
        {Input{Shape{4, 3}}, Input{Shape{6, 3}}, Input{Shape{6}, 0, 4, false, DType::i64}});
  check("embedding", [](auto& t) { return lt::embedding(t[1].to(DType::i64), t[0]); },
        {Input{Shape{5, 3}}, Input{Shape{2, 4}, 0, 5, false, DType::i64}});
}

// Sorting moves each value's gradient with it (distinct values: a tie would swap them inside a
// central difference); running sums take the gradient's sums from the end.
TEST_F(GradCheck, SortingAndRunningSums) {
  const Input distinct{.shape = Shape{3, 5}, .distinct = true};
  check("sort", [](auto& t) { return lt::sort(t[0], 1).values; }, {distinct});
  check("sort_descending_dim0", [](auto& t) { return lt::sort(t[0], 0, true).values; }, {distinct});
  check("topk", [](auto& t) { return lt::topk(t[0], 2, 1).values; }, {distinct});
  check("take_along_dim", [](auto& t) { return lt::take_along_dim(t[0], t[1].to(DType::i64), 1); },
        {Input{Shape{3, 5}}, Input{Shape{3, 7}, 0, 5, false, DType::i64}});
  check("cumsum", [](auto& t) { return lt::cumsum(t[0], 1); }, {Input{Shape{3, 5}}});
  check("cumsum_dim0", [](auto& t) { return lt::cumsum(t[0] * t[0], 0); }, {Input{Shape{4, 2}}});
}

TEST_F(GradCheck, MatrixProducts) {
  check("matmul_2d", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{3, 4}}, Input{Shape{4, 2}}});
  check("matmul_batch_broadcast", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{2, 1, 3, 4}}, Input{Shape{3, 4, 5}}});
  check("matmul_shared_weight", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{2, 3, 4}}, Input{Shape{4, 5}}});
  check("matmul_transposed_views", [](auto& t) { return lt::matmul(t[0].t(), t[1].t()); },
        {Input{Shape{4, 3}}, Input{Shape{2, 4}}});
  check("matmul_vector_matrix", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{4}}, Input{Shape{4, 3}}});
  check("matmul_matrix_vector", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{2, 4, 3}}, Input{Shape{3}}});
  check("matmul_dot", [](auto& t) { return lt::matmul(t[0], t[1]); },
        {Input{Shape{4}}, Input{Shape{4}}});
  check("bmm", [](auto& t) { return lt::bmm(t[0], t[1].transpose(1, 2)); },
        {Input{Shape{2, 3, 4}}, Input{Shape{2, 5, 4}}});
  // Right operands read transposed (their gradients are products of the transposes): a
  // shared weight as nn.Linear holds it, and attention's keys stored [batch, length, heads,
  // dim] and read [batch, heads, dim, length].
  check("matmul_shared_transposed_weight", [](auto& t) { return lt::matmul(t[0], t[1].t()); },
        {Input{Shape{2, 3, 4}}, Input{Shape{5, 4}}});
  check("matmul_permuted_keys",
        [](auto& t) {
          return lt::matmul(t[0], t[1].permute({0, 2, 3, 1}));
        },
        {Input{Shape{2, 3, 5, 4}}, Input{Shape{2, 6, 3, 4}}});
  check("linear", [](auto& t) { return lt::linear(t[0], t[1], t[2]); },
        {Input{Shape{2, 3, 4}}, Input{Shape{5, 4}}, Input{Shape{5}}});
  check("linear_no_bias", [](auto& t) { return lt::linear(t[0], t[1]); },
        {Input{Shape{4}}, Input{Shape{5, 4}}});
}

TEST_F(GradCheck, NeuralNetworkOps) {
  const Input x{Shape{2, 3, 5}, -3, 3};
  check("softmax", [](auto& t) { return lt::softmax(t[0], -1); }, {x});
  check("softmax_dim0", [](auto& t) { return lt::softmax(t[0], 0); }, {x});
  check("log_softmax", [](auto& t) { return lt::log_softmax(t[0], 1); }, {x});
  check("logsumexp", [](auto& t) { return lt::logsumexp(t[0], {-1}); }, {x});
  check("logsumexp_two_dims_kept", [](auto& t) { return lt::logsumexp(t[0], {0, 2}, true); }, {x});
  check("layer_norm", [](auto& t) { return lt::layer_norm(t[0], {5}, t[1], t[2], 1e-5); },
        {x, Input{Shape{5}}, Input{Shape{5}}});
  check("layer_norm_2d", [](auto& t) { return lt::layer_norm(t[0], {3, 5}); }, {x});
  check("gelu", [](auto& t) { return lt::gelu(t[0]); }, {x});
  check("gelu_tanh", [](auto& t) { return lt::gelu(t[0], lt::GeluApproximation::tanh); }, {x});
  check("cross_entropy",
        [](auto& t) {
          // Ids in [-1, 4): -1 is the ignored class here. A last row of class 2 keeps one row
          // counted, where six ignored rows would make the mean 0 / 0.
          const Tensor ids = lt::cat({t[1], lt::from_vector(std::vector<int64_t>{2}, {1})}, 0);
          return lt::cross_entropy(t[0], ids, -1);
        },
        {Input{Shape{7, 4}, -3, 3}, Input{Shape{6}, -1, 4, false, DType::i64}});
  check("cross_entropy_sum",
        [](auto& t) {
          return lt::cross_entropy(t[0], t[1].to(DType::i64), -100, lt::Reduction::sum);
        },
        {Input{Shape{3, 5}, -3, 3}, Input{Shape{3}, 0, 5, false, DType::i64}});
  check("mse_loss", [](auto& t) { return lt::mse_loss(t[0], t[1]); }, {x, x});
  const lt::GeneratorState state{1234, 7};
  check(
      "dropout", [](auto& t) { return lt::dropout(t[0], 0.4) * t[0]; }, {x},
      [state] { lt::set_generator_state(state); });
}

}  // namespace
