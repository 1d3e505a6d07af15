// NN ops and training: ops and a BERT layer against PyTorch's values and gradients (shipped in
// tests/data, made by bench/reference/transformer_block_reference.py), dropout's generator,
// small fits trained with forward + backward + AdamW in one graph per step, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt_test::counter;
using lt_test::elementwise;
using lt_test::error_message;
using lt_test::expect_close;
using lt_test::expect_mentions;
using json = nlohmann::json;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

const json& reference() {
  static const json data = [] {
    std::ifstream in(std::string(LT_TEST_DATA_DIR) + "/transformer_block_reference.json");
    return json::parse(in);
  }();
  return data;
}

Shape shape_of(const json& entry) {
  return Shape(entry["shape"].get<std::vector<int64_t>>());
}

std::vector<double> values_of(const json& entry) {
  return entry["values"].get<std::vector<double>>();
}

Tensor tensor_of(const json& entry, DType dtype = DType::f64) {
  return lt::from_vector(values_of(entry), shape_of(entry)).to(dtype);
}

constexpr lt_test::Tol kF64{1e-9, 1e-11};

class PyTorchParity : public lt_test::EngineTest {
 protected:
  // Checks op's output and the gradients of sum(output * upstream) for the "ops" entry `name`.
  void check_op(const std::string& name, const std::vector<std::string>& float_inputs,
                const std::vector<std::string>& id_inputs,
                const std::function<Tensor(std::map<std::string, Tensor>&)>& op) {
    SCOPED_TRACE(name);
    const json& entry = reference()["ops"][name];
    std::map<std::string, Tensor> in;
    std::vector<Tensor> wrt;
    for (const std::string& key : float_inputs) {
      in[key] = tensor_of(entry["inputs"][key]).requires_grad_();
      wrt.push_back(in[key]);
    }
    for (const std::string& key : id_inputs) in[key] = tensor_of(entry["inputs"][key], DType::i64);
    const Tensor out = op(in);
    ASSERT_EQ(out.shape(), shape_of(entry["output"]));
    expect_close(out.to_vector<double>(), values_of(entry["output"]), kF64);
    const Tensor loss = (out * tensor_of(entry["upstream"])).sum();
    const std::vector<Tensor> grads = lt::grad({loss}, wrt);
    for (size_t k = 0; k < float_inputs.size(); ++k) {
      SCOPED_TRACE("d/d " + float_inputs[k]);
      expect_close(grads[k].to_vector<double>(), values_of(entry["grads"][float_inputs[k]]), kF64);
    }
  }
};

TEST_F(PyTorchParity, SingleOps) {
  check_op("softmax_dim1", {"x"}, {}, [](auto& in) { return lt::softmax(in["x"], 1); });
  check_op("log_softmax_dim0", {"x"}, {}, [](auto& in) { return lt::log_softmax(in["x"], 0); });
  check_op("layer_norm", {"x", "weight", "bias"}, {},
           [](auto& in) { return lt::layer_norm(in["x"], {6}, in["weight"], in["bias"], 1e-5); });
  check_op("gelu_erf", {"x"}, {}, [](auto& in) { return lt::gelu(in["x"]); });
  check_op("gelu_tanh", {"x"}, {},
           [](auto& in) { return lt::gelu(in["x"], lt::GeluApproximation::tanh); });
  check_op("cross_entropy", {"logits"}, {"targets"},
           [](auto& in) { return lt::cross_entropy(in["logits"], in["targets"]); });
  check_op("matmul_broadcast", {"a", "b"}, {},
           [](auto& in) { return lt::matmul(in["a"], in["b"]); });
  check_op("embedding", {"weight"}, {"ids"},
           [](auto& in) { return lt::embedding(in["ids"], in["weight"]); });
  check_op("var_unbiased", {"x"}, {}, [](auto& in) { return in["x"].var({1}); });
  check_op("mean_dim", {"x"}, {}, [](auto& in) { return in["x"].mean({0, 2}, true); });
}

// A post-LN BERT layer with an MLM-style head and cross-entropy: every intermediate, the loss
// and every gradient as PyTorch computes them.
TEST_F(PyTorchParity, TransformerBlock) {
  const json& ref = reference();
  const json& config = ref["config"];
  const int64_t B = config["B"], S = config["S"], H = config["H"], NH = config["NH"],
                D = config["D"], V = config["V"];
  const double eps = config["eps"];
  std::map<std::string, Tensor> p;
  std::vector<std::string> names;
  for (const auto& [name, entry] : ref["grads"].items()) {
    p[name] = tensor_of(ref["inputs"][name]).requires_grad_();
    names.push_back(name);
  }
  const Tensor mask = tensor_of(ref["inputs"]["mask"]);
  const Tensor targets = tensor_of(ref["inputs"]["targets"], DType::i64);
  auto heads = [&](const Tensor& t) { return t.reshape({B, S, NH, D}).permute({0, 2, 1, 3}); };
  const Tensor& x = p["x"];
  const Tensor q = heads(lt::linear(x, p["Wq"], p["bq"]));
  const Tensor k = heads(lt::linear(x, p["Wk"], p["bk"]));
  const Tensor v = heads(lt::linear(x, p["Wv"], p["bv"]));
  const Tensor additive = (1.0 - mask).unsqueeze(1).unsqueeze(1) * -10000.0;
  const Tensor scores =
      lt::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(D)) + additive;
  const Tensor probs = lt::softmax(scores, -1);
  const Tensor ctx = lt::matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, S, H});
  const Tensor attn = lt::linear(ctx, p["Wo"], p["bo"]);
  const Tensor h1 = lt::layer_norm(x + attn, {H}, p["ln1_w"], p["ln1_b"], eps);
  const Tensor ff = lt::linear(lt::gelu(lt::linear(h1, p["W1"], p["b1"])), p["W2"], p["b2"]);
  const Tensor h2 = lt::layer_norm(h1 + ff, {H}, p["ln2_w"], p["ln2_b"], eps);
  const Tensor logits = lt::linear(h2, p["Wout"], p["bout"]);
  const Tensor loss = lt::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  loss.backward();

  const json& out = ref["outputs"];
  // exp(-10000) is 0 in PyTorch and here: absolute tolerance for the masked probabilities.
  expect_close(probs.to_vector<double>(), values_of(out["probs"]), kF64);
  expect_close(h1.to_vector<double>(), values_of(out["h1"]), kF64);
  expect_close(h2.to_vector<double>(), values_of(out["h2"]), kF64);
  expect_close(logits.to_vector<double>(), values_of(out["logits"]), kF64);
  EXPECT_NEAR(loss.item(), out["loss"].get<double>(), 1e-11);
  for (const std::string& name : names) {
    SCOPED_TRACE("grad " + name);
    ASSERT_TRUE(p[name].grad().defined());
    expect_close(p[name].grad().to_vector<double>(), values_of(ref["grads"][name]), kF64);
  }
}

// logsumexp over one dim or several, kept or dropped, against a double-precision reference;
// values of ±80 overflow exp() in f32 without the shift by the max; rows of -inf and rows
// holding +inf give what torch.logsumexp gives.
class LogSumExp : public lt_test::EngineTest {};

TEST_F(LogSumExp, MatchesADoublePrecisionReferenceAndKeepsInfinities) {
  const int64_t a = 3, b = 5, c = 7;
  std::vector<float> x = values(a * b * c, -80, 80);
  x[0 * b * c + 2 * c + 0] = -INFINITY;  // one -inf in a row of finite values
  for (int64_t j = 0; j < b; ++j) x[1 * b * c + j * c + 3] = -INFINITY;  // a whole row of -inf
  x[2 * b * c + 4 * c + 6] = INFINITY;
  const Tensor t = lt::from_vector(x, Shape{a, b, c});
  auto at = [&](int64_t i, int64_t j, int64_t k) {
    return static_cast<double>(x[(i * b + j) * c + k]);
  };
  auto reference = [](const std::vector<double>& row) {
    double max = -INFINITY;
    for (double v : row) max = std::max(max, v);
    if (std::isinf(max)) return max;
    double sum = 0;
    for (double v : row) sum += std::exp(v - max);
    return max + std::log(sum);
  };
  // Over dim 1, the dims kept or dropped: [a, 1, c] or [a, c].
  std::vector<double> over_b;
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      std::vector<double> row;
      for (int64_t j = 0; j < b; ++j) row.push_back(at(i, j, k));
      over_b.push_back(reference(row));
    }
  }
  const Tensor kept = t.logsumexp({1}, /*keepdim=*/true);
  EXPECT_EQ(kept.shape(), (Shape{a, 1, c}));
  expect_close(kept.to_vector<double>(), over_b, {1e-6, 1e-5});
  const Tensor dropped = lt::logsumexp(t, {-2});
  EXPECT_EQ(dropped.shape(), (Shape{a, c}));
  expect_close(dropped.to_vector<double>(), over_b, {1e-6, 1e-5});
  // Over dims 0 and 2: [b].
  std::vector<double> over_ac;
  for (int64_t j = 0; j < b; ++j) {
    std::vector<double> row;
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t k = 0; k < c; ++k) row.push_back(at(i, j, k));
    }
    over_ac.push_back(reference(row));
  }
  const Tensor two = t.logsumexp({0, 2});
  EXPECT_EQ(two.shape(), (Shape{b}));
  expect_close(two.to_vector<double>(), over_ac, {1e-6, 1e-5});
  expect_mentions(error_message([&] { t.logsumexp({3}); }), {"logsumexp", "dim 3"});
}

class Autograd : public lt_test::EngineTest {};

TEST_F(Autograd, GradAccumulatesOverBackwardCallsAndClears) {
  Tensor w = lt::from_vector(std::vector<double>{1.5, -2.0}, {2}).requires_grad_();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_TRUE(w.is_leaf());
  (w * w).sum().backward();
  (w * 3.0).sum().backward();
  expect_close(w.grad().to_vector<double>(), {2 * 1.5 + 3, 2 * -2.0 + 3}, kF64);
  const Tensor held = w.grad();
  (w * 1.0).sum().backward();  // in place: a handle taken earlier sees the sum too
  expect_close(held.to_vector<double>(), {7, 0}, kF64);
  lt::optim::SGD sgd({w}, lt::optim::SGDOptions{});
  sgd.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST_F(Autograd, GradOfIntermediatesLeavesLeavesAlone) {
  Tensor x = lt::from_vector(std::vector<double>{0.5, 1.0, 2.0}, {3}).requires_grad_();
  const Tensor y = x.exp();
  const Tensor z = (y * y).sum();
  const std::vector<Tensor> g = lt::grad({z}, {y, x});
  expect_close(g[0].to_vector<double>(),
               elementwise({0.5, 1.0, 2.0}, [](double v) { return 2 * std::exp(v); }), kF64);
  expect_close(g[1].to_vector<double>(),
               elementwise({0.5, 1.0, 2.0}, [](double v) { return 2 * std::exp(2 * v); }), kF64);
  EXPECT_FALSE(x.grad().defined());
}

TEST_F(Autograd, NoGradGuardDetachAndRequiresGrad) {
  Tensor w = lt::from_vector(std::vector<double>{1, 2}, {2}).requires_grad_();
  {
    const lt::NoGradGuard no_grad;
    EXPECT_FALSE((w * 2.0).requires_grad());
    EXPECT_FALSE(lt::is_grad_enabled());
  }
  EXPECT_TRUE(lt::is_grad_enabled());
  EXPECT_TRUE((w * 2.0).requires_grad());
  EXPECT_FALSE((w * 2.0).is_leaf());
  EXPECT_FALSE(w.detach().requires_grad());
  // Only the path through w counts: the detached factor is a constant.
  (w * w.detach()).sum().backward();
  expect_close(w.grad().to_vector<double>(), {1, 2}, kF64);
}

TEST_F(Autograd, BackwardIsTracedNotRun) {
  Tensor w = lt::randn({64, 64}, 1, DType::f32).requires_grad_();
  lt_test::settle();
  const Tensor loss = lt::matmul(w, w).tanh().sum();
  loss.backward();
  // Nothing ran: the forward and backward pass are pending until the graph is cut.
  EXPECT_TRUE(w.grad().is_pending());
  EXPECT_EQ(counter("ExecuteComputation"), 0);
  lt::mark_step();
  EXPECT_FALSE(w.grad().is_pending());
  lt::wait_device_ops();
}

TEST_F(Autograd, LongChainsReleaseWithoutRecursion) {
  Tensor x = lt::ones({4}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 200000; ++i) y = y * 1.0;
  y = Tensor();  // the whole recorded chain dies here, iteratively
  SUCCEED();
}

class RowGroups : public lt_test::EngineTest {};

struct ProfiledLaunch {
  std::string name;    // "row group", "matmul", "reduction kernel", ...
  std::string detail;  // what it computed
};

// Cuts the traced step under the profiler and returns its launches in the order they ran, as
// the profiler's timeline names them.
std::vector<ProfiledLaunch> run_step_profiled() {
  const lt_test::Restore restore([] { lt::profiler::stop(); });
  lt::profiler::start();
  lt::mark_step();
  lt::wait_device_ops();
  lt::profiler::stop();
  const lt_test::TempDir dir;
  const std::string path = (dir.path() / "trace.json").string();
  lt::profiler::write_chrome_trace(path);
  std::ifstream in(path);
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::vector<std::pair<double, ProfiledLaunch>> launches;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event.value("cat", "") != "launch") continue;
    launches.push_back(
        {event.value("ts", 0.0),
         {event.value("name", ""),
          event.value("args", nlohmann::json::object()).value("detail", std::string())}});
  }
  std::stable_sort(launches.begin(), launches.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ProfiledLaunch> in_order;
  for (auto& [start, launch] : launches) in_order.push_back(std::move(launch));
  return in_order;
}

// Softmax, layer norm and cross-entropy run their launches row block by row block; the values
// are those of launch-by-launch runs, bit for bit (the same kernels fold the same elements).
TEST_F(RowGroups, SoftmaxLayerNormAndCrossEntropyRunRowBlocksWithTheSameValues) {
  const lt_test::Restore restore([] { lt::set_row_groups(true); });
  const Tensor x = lt::from_vector(values(64 * 40, -4, 4), {64, 40});
  const Tensor w = lt::from_vector(values(40, 0.5, 1.5), {40});
  std::vector<int64_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(i % 40);
  const Tensor targets = lt::from_vector(ids, {64});
  lt::mark_step();
  const std::vector<std::pair<std::string, std::function<Tensor()>>> ops = {
      {"softmax", [&] { return lt::softmax(x, -1); }},
      {"layer_norm", [&] { return lt::layer_norm(x, {40}, w, w, 1e-5); }},
      {"cross_entropy", [&] { return lt::cross_entropy(x, targets); }},
  };
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    std::vector<float> results[2];
    for (bool grouped : {false, true}) {
      lt::set_row_groups(grouped);
      lt::metrics::reset();
      const Tensor y = op();
      lt::mark_step();
      results[grouped] = y.to_vector();
      EXPECT_EQ(counter("RowGroupLaunch") > 0, grouped);
    }
    EXPECT_EQ(results[0], results[1]);
  }
}

// Cross-entropy over a language model's head (logits of [batch, sequence, classes] seen as
// [rows, classes]) with its backward pass: the row max, the pick of the target's logit, the sum
// of exponentials and the gradient are one row group, so the logits are read from memory once
// (the pick reads them from cache). Checked in the profiler's timeline, whose launch events
// name what each launch computed.
TEST_F(RowGroups, CrossEntropyReadsTheLogitsInOneGroup) {
  const Tensor hidden = lt::from_vector(values(4 * 16 * 8), {4, 16, 8});
  const Tensor weight = lt::from_vector(values(40 * 8), {40, 8}).requires_grad_();
  std::vector<int64_t> ids;
  for (int i = 0; i < 64; ++i) ids.push_back(i * 7 % 40);
  const Tensor targets = lt::from_vector(ids, {64});
  lt::mark_step();
  const Tensor logits = lt::matmul(hidden, weight.t());
  const Tensor loss = lt::cross_entropy(logits.view({-1, 40}), targets);
  loss.backward();
  const std::string row_reduction = "over [64, 40] (dims 1)";
  int groups = 0;
  for (const ProfiledLaunch& launch : run_step_profiled()) {
    const std::string& detail = launch.detail;
    SCOPED_TRACE(launch.name + ": " + detail);
    EXPECT_FALSE(detail.empty());
    if (launch.name == "reduction kernel") {
      EXPECT_EQ(detail.find(row_reduction), std::string::npos);
    }
    if (launch.name != "row group" || detail.find(row_reduction) == std::string::npos) continue;
    ++groups;
    int reductions = 0;
    for (size_t at = detail.find(row_reduction); at != std::string::npos;
         at = detail.find(row_reduction, at + 1)) {
      ++reductions;
    }
    EXPECT_EQ(reductions, 3);  // the max, the target's logit and the sum of exponentials
  }
  EXPECT_EQ(groups, 1);
  EXPECT_TRUE(std::isfinite(loss.item()));
}

// A bias gradient's column sum runs right after the launch that writes the output gradient it
// sums (here layer norm's backward row group), before the products that read the same gradient:
// in level order they came first (the input's gradient feeds the rest of the backward pass),
// and the sum read the gradient from memory after them.
TEST_F(RowGroups, BiasGradientSumRunsRightAfterTheGroupThatWritesItsInput) {
  const int64_t rows = 64, in = 32, hidden = 40, out = 48;
  const Tensor x = lt::from_vector(values(rows * in), {4, rows / 4, in});
  const Tensor w1 = lt::from_vector(values(hidden * in), {hidden, in}).requires_grad_();
  const Tensor b1 = lt::from_vector(values(hidden), {hidden}).requires_grad_();
  const Tensor w2 = lt::from_vector(values(out * hidden), {out, hidden}).requires_grad_();
  const Tensor b2 = lt::from_vector(values(out), {out}).requires_grad_();
  const Tensor gamma = lt::from_vector(values(out, 0.5, 1.5), {out});
  lt::mark_step();
  const Tensor h = lt::linear(x, w1, b1).tanh();
  lt::layer_norm(lt::linear(h, w2, b2), {out}, gamma, gamma, 1e-5).tanh().sum().backward();
  const std::vector<ProfiledLaunch> launches = run_step_profiled();
  const std::string column_sum = "reduction of 1 ops over [4, 16, 48] (dims 0 1)";
  int sums = 0;
  for (size_t i = 1; i < launches.size(); ++i) {
    if (launches[i].name != "reduction kernel" || launches[i].detail.rfind(column_sum, 0) != 0) {
      continue;
    }
    ++sums;
    EXPECT_EQ(launches[i - 1].name, "row group") << launches[i - 1].detail;
  }
  EXPECT_EQ(sums, 1);
  EXPECT_TRUE(std::isfinite(b2.grad().sum().item()));
}

// A temporary that only its row group writes and reads, row for row (softmax's exponentials,
// its row maxima and sums), takes no arena bytes on the CPU: each worker keeps a block's rows of
// it in scratch of its own. The values are those of launch-by-launch runs, bit for bit.
TEST_F(RowGroups, RowLocalTemporariesTakeNoArenaBytes) {
  const lt_test::Restore restore([] { lt::set_row_groups(true); });
  const int64_t rows = 512, cols = 300;
  const Tensor x = lt::from_vector(values(rows * cols, -4, 4), {rows, cols});
  lt::mark_step();
  std::vector<float> results[2];
  int64_t temporaries[2] = {};
  for (bool grouped : {false, true}) {
    lt::set_row_groups(grouped);
    const Tensor y = lt::softmax(x, -1);
    lt::mark_step();
    temporaries[grouped] = lt::last_step_stats().temporary_bytes;
    results[grouped] = y.to_vector();
  }
  EXPECT_GE(temporaries[false], rows * cols * 4);  // the exponentials, in the arena
  EXPECT_LE(temporaries[true], 64);                // none of it
  EXPECT_EQ(results[0], results[1]);
}

// Softmax over tensors of three shapes in one step: each launch is one multi-tensor launch
// (the same program over the three), and the group runs tensor by tensor, each tensor's
// blocks of rows through all the launches. The same bits as launch by launch.
TEST_F(RowGroups, MultiTensorLaunchesGroupTensorByTensor) {
  const lt_test::Restore restore([] { lt::set_row_groups(true); });
  const std::vector<Shape> shapes = {{64, 40}, {32, 40}, {3, 16, 17}};
  std::vector<Tensor> xs;
  for (const Shape& shape : shapes)
    xs.push_back(lt::from_vector(values(shape.numel(), -4, 4), shape));
  lt::mark_step();
  std::vector<std::vector<float>> results[2];
  for (bool grouped : {false, true}) {
    lt::set_row_groups(grouped);
    std::vector<Tensor> ys;
    for (const Tensor& x : xs) ys.push_back(lt::softmax(x, -1));
    int groups = 0;
    for (const ProfiledLaunch& launch : run_step_profiled()) {
      if (launch.name != "row group") continue;
      ++groups;
      EXPECT_NE(launch.detail.find("3 tensors"), std::string::npos) << launch.detail;
    }
    EXPECT_EQ(groups, grouped ? 1 : 0);
    for (const Tensor& y : ys) results[grouped].push_back(y.to_vector());
  }
  EXPECT_EQ(results[0], results[1]);
}

// Graphs where a multi-tensor row group's kernels read values that other kernels of the group
// could write over (an elementwise kernel that is a value's last reader takes its buffer): the
// group runs one tensor's blocks after another, so only a reader of the same tensor may have
// read a block's rows before they are overwritten. The same bits as launch by launch.
TEST_F(RowGroups, MultiTensorGroupsOverwriteOnlyWhatTheirOwnTensorRead) {
  const lt_test::Restore restore([] { lt::set_row_groups(true); });
  const Shape shape{48, 40};
  const Tensor x = lt::from_vector(values(shape.numel(), -2, 2), shape);
  const Tensor a = lt::from_vector(values(shape.numel(), -2, 2), shape);
  const Tensor b = lt::from_vector(values(shape.numel(), -2, 2), shape);
  lt::mark_step();
  // Two tensors' row maxima are one multi-tensor launch, and so are the products after them:
  // tensor 1's maximum reads s, then tensor 0's product reads s last and writes a temporary of
  // s's size, which may take s's buffer only if no other tensor of the group reads s (tensor 1's
  // blocks run after tensor 0's).
  const std::vector<std::pair<std::string, std::function<std::vector<Tensor>()>>> graphs = {
      {"crossed reads",
       [&] {
         const Tensor s = x.exp(), t = x.tanh();
         const Tensor m0 = (a * t).max({1}, true), m1 = (b * s).max({1}, true);
         const Tensor w0 = (a - m0) * s, w1 = (b - m1) * t;
         return std::vector<Tensor>{w0.sum({0}), w0.exp(), w1.sum({0}), w1.exp()};
       }},
  };
  for (const auto& [name, graph] : graphs) {
    SCOPED_TRACE(name);
    std::vector<std::vector<float>> results[2];
    for (bool grouped : {false, true}) {
      lt::set_row_groups(grouped);
      lt::metrics::reset();
      const std::vector<Tensor> ys = graph();
      lt::mark_step();
      for (const Tensor& y : ys) results[grouped].push_back(y.to_vector());
      EXPECT_EQ(counter("RowGroupLaunch") > 0, grouped);
    }
    EXPECT_EQ(results[0], results[1]);
  }
}

class Memory : public lt_test::EngineTest {};

// cross_entropy keeps the logits and two numbers per row for its backward pass, and the
// gradient over the logits is written over them: the step's temporaries are one logits'
// worth (composed of primitives it held the shifted logits and their exponentials too).
TEST_F(Memory, CrossEntropyGradientTakesTheLogitsBuffer) {
  const int64_t n = 256, classes = 2048, width = 16;
  const Tensor hidden = lt::from_vector(values(n * width), {n, width}).requires_grad_();
  const Tensor weight = lt::from_vector(values(classes * width), {classes, width}).requires_grad_();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(i * 7919 % classes);
  const Tensor targets = lt::from_vector(ids, {n});
  lt::mark_step();
  const Tensor loss = lt::cross_entropy(lt::matmul(hidden, weight.t()), targets);
  loss.backward();
  lt::mark_step();
  const int64_t logits_bytes = n * classes * 4;
  EXPECT_GE(lt::last_step_stats().temporary_bytes, logits_bytes);
  EXPECT_LE(lt::last_step_stats().temporary_bytes, logits_bytes + logits_bytes / 8);
  EXPECT_TRUE(std::isfinite(loss.item()));
}

class Views : public lt_test::EngineTest {};

// Every view op gives a new value (even a transpose of a vector), and ops whose results are
// new values take in-place updates however they shaped them inside (found by the fuzz test).
TEST_F(Views, AreValuesAndNewResultsTakeInPlaceOps) {
  Tensor a = lt::ones({3});
  const Tensor t = a.t(), u = a.unsqueeze(0);
  Tensor s = lt::full({}, 5.0);
  const Tensor st = s.transpose(0, 0);
  a.add_(1.0);
  s.mul_(2.0);
  EXPECT_EQ(t.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(u.to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(st.item(), 5.0);
  Tensor y = lt::matmul(lt::ones({3}), lt::ones({3, 2}));
  y.add_(1.0);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 4}));
  Tensor e = lt::embedding(lt::from_vector(std::vector<int64_t>{1}, {1}), lt::ones({2, 3}));
  e.add_(1.0);
  EXPECT_EQ(e.to_vector(), (std::vector<float>{2, 2, 2}));
}

class Dropout : public lt_test::EngineTest {};

TEST_F(Dropout, MasksAreFreshEachCallReproducibleFromTheSeedAndScaled) {
  const Tensor x = lt::ones({4096});
  lt::manual_seed(42);
  const std::vector<float> a = lt::dropout(x, 0.25).to_vector();
  const std::vector<float> b = lt::dropout(x, 0.25).to_vector();
  lt::manual_seed(42);
  const std::vector<float> a_again = lt::dropout(x, 0.25).to_vector();
  EXPECT_EQ(a, a_again);
  EXPECT_NE(a, b);
  int zeros = 0;
  for (float v : a) {
    if (v == 0) {
      ++zeros;
    } else {
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
    }
  }
  // 1024 expected; 6 standard deviations is about 166.
  EXPECT_NEAR(zeros, 1024, 166);
  EXPECT_EQ(lt::dropout(x, 0.25, /*train=*/false).to_vector(), x.to_vector());
}

// The masks' generator (a 32-bit hash of the position and the draw's key): each probability is
// kept at its rate, neighbours and the masks of two draws are independent, and bf16 and f64
// inputs get masks of their own dtype. Bounds are 6 standard deviations.
TEST_F(Dropout, MasksKeepTheirRateAndAreIndependentAcrossPositionsAndDraws) {
  constexpr int64_t kRows = 2048, kCols = 128;  // attention's rows: a mask per row of 128
  const double n = static_cast<double>(kRows * kCols);
  const Tensor x = lt::ones({kRows, kCols});
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    const double q = 1 - p;
    const std::vector<float> a = lt::dropout(x, p).to_vector();
    const std::vector<float> b = lt::dropout(x, p).to_vector();
    double kept = 0, kept_pairs = 0, agree = 0;
    std::vector<double> kept_in_column(kCols, 0);
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      const bool keep = a[i] != 0;
      kept += keep;
      kept_in_column[i % kCols] += keep;
      if (i + 1 < kRows * kCols) kept_pairs += keep && a[i + 1] != 0;
      agree += keep == (b[i] != 0);
    }
    EXPECT_NEAR(kept / n, q, 6 * std::sqrt(q * (1 - q) / n));
    EXPECT_NEAR(kept_pairs / (n - 1), q * q, 6 * std::sqrt(q * q * (1 - q * q) / n) * 2);
    const double agree_rate = q * q + p * p;
    EXPECT_NEAR(agree / n, agree_rate, 6 * std::sqrt(agree_rate * (1 - agree_rate) / n));
    // The same rate at every position of a row (no column pattern from the low bits).
    const double column_sd = std::sqrt(q * (1 - q) / kRows);
    for (int64_t c = 0; c < kCols; ++c) {
      EXPECT_NEAR(kept_in_column[c] / kRows, q, 6 * column_sd) << "column " << c;
    }
  }
  for (lt::DType dtype : {lt::DType::bf16, lt::DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const Tensor y = lt::dropout(lt::ones({4096}, dtype), 0.3);
    EXPECT_EQ(y.dtype(), dtype);
    const std::vector<double> values = y.to(lt::DType::f64).to_vector<double>();
    const double scale = lt::ones({1}, dtype).mul(1 / 0.7).item();  // rounded as dropout's
    int zeros = 0;
    for (double v : values) {
      if (v == 0) {
        ++zeros;
      } else {
        EXPECT_EQ(v, scale);
      }
    }
    EXPECT_NEAR(zeros, 0.3 * 4096, 6 * std::sqrt(0.3 * 0.7 * 4096));
  }
}

TEST_F(Dropout, ANewMaskEveryStepNeverRecompiles) {
  const Tensor x = lt::ones({256});
  lt::mark_step();  // x is device data in every step below
  std::vector<float> previous;
  for (int step = 0; step < 5; ++step) {
    Tensor y = lt::dropout(x, 0.5) * 2.0;
    lt::mark_step();
    const std::vector<float> now = y.to_vector();
    if (step > 0) {
      EXPECT_NE(now, previous);
    }
    previous = now;
    if (step == 0) lt::metrics::reset();
  }
  EXPECT_EQ(counter("UncachedCompile"), 0);
}

// Two Gaussian blobs, linearly separable up to a little overlap.
struct Blobs {
  Tensor x, y;
};

Blobs make_blobs(int64_t n, uint64_t seed) {
  std::mt19937 gen(static_cast<uint32_t>(seed));
  std::normal_distribution<float> noise(0.0f, 0.6f);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = i % 2;
    const float cx = label ? 1.5f : -1.5f, cy = label ? -1.0f : 1.0f;
    xs.push_back(cx + noise(gen));
    xs.push_back(cy + noise(gen));
    ys.push_back(label);
  }
  return {lt::from_vector(xs, {n, 2}), lt::from_vector(ys, {n})};
}

class Training : public lt_test::EngineTest {};

TEST_F(Training, MlpFitsTwoClassesInOneGraphPerStep) {
  lt::manual_seed(seed());
  const Blobs data = make_blobs(256, seed());
  Tensor w1 = (lt::randn({32, 2}, next_seed()) * 0.5).requires_grad_();
  Tensor b1 = lt::zeros({32}).requires_grad_();
  Tensor w2 = (lt::randn({2, 32}, next_seed()) * 0.2).requires_grad_();
  Tensor b2 = lt::zeros({2}).requires_grad_();
  lt::mark_step();
  lt::optim::AdamW opt({w1, b1, w2, b2}, lt::optim::AdamWOptions{.lr = 0.02, .weight_decay = 0.01});
  const auto schedule = lt::optim::linear_schedule(10, 120);
  std::vector<double> losses;
  for (int step = 0; step < 120; ++step) {
    opt.set_lr(schedule->lr(0.02, step));
    const Tensor hidden = lt::dropout(lt::gelu(lt::linear(data.x, w1, b1)), 0.1);
    const Tensor loss = lt::cross_entropy(lt::linear(hidden, w2, b2), data.y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    lt::mark_step();
    losses.push_back(loss.item());
    if (step == 0) lt::metrics::reset();
  }
  // Forward, backward and update with a new lr and a new dropout mask each step: compiled once.
  EXPECT_EQ(counter("UncachedCompile"), 0);
  EXPECT_EQ(counter("CachedCompile"), 119);
  EXPECT_LT(losses.back(), 0.15) << "the loss did not fall: first " << losses.front();
  EXPECT_LT(losses.back(), 0.5 * losses.front());
  // Evaluation without dropout or autograd: the blobs are nearly separable.
  const lt::NoGradGuard no_grad;
  const Tensor predicted = lt::linear(lt::gelu(lt::linear(data.x, w1, b1)), w2, b2).argmax(1);
  const std::vector<int64_t> got = predicted.to_vector<int64_t>();
  const std::vector<int64_t> want = data.y.to_vector<int64_t>();
  int correct = 0;
  for (size_t i = 0; i < got.size(); ++i) correct += got[i] == want[i];
  EXPECT_GE(correct, 240);
}

TEST_F(Training, TransformerBlockMemorizesABatch) {
  lt::manual_seed(seed());
  const int64_t B = 2, S = 8, H = 16, NH = 2, D = 8, I = 32, V = 13;
  std::vector<Tensor> params;
  auto param = [&](std::vector<int64_t> shape, double scale) {
    Tensor t = (lt::randn(Shape(shape), next_seed()) * scale).requires_grad_();
    params.push_back(t);
    return t;
  };
  const Tensor emb = param({V, H}, 0.5), wq = param({H, H}, 0.3), wk = param({H, H}, 0.3),
               wv = param({H, H}, 0.3), wo = param({H, H}, 0.3), w1 = param({I, H}, 0.3),
               w2 = param({H, I}, 0.3), wout = param({V, H}, 0.3);
  const Tensor ln_w = lt::ones({H}).requires_grad_(), ln_b = lt::zeros({H}).requires_grad_();
  params.push_back(ln_w);
  params.push_back(ln_b);
  std::vector<int64_t> ids_host, target_host;
  std::mt19937 gen(seed());
  for (int64_t i = 0; i < B * S; ++i) {
    ids_host.push_back(gen() % V);
    target_host.push_back(i % 5 == 0 ? -100 : static_cast<int64_t>(gen() % V));
  }
  const Tensor ids = lt::from_vector(ids_host, {B, S});
  const Tensor targets = lt::from_vector(target_host, {B * S});
  lt::mark_step();
  lt::optim::AdamW opt(params, lt::optim::AdamWOptions{.lr = 3e-3});
  auto heads = [&](const Tensor& t) { return t.reshape({B, S, NH, D}).permute({0, 2, 1, 3}); };
  std::vector<double> losses;
  for (int step = 0; step < 60; ++step) {
    const Tensor x = lt::embedding(ids, emb);
    const Tensor probs = lt::dropout(
        lt::softmax(
            lt::matmul(heads(lt::linear(x, wq)), heads(lt::linear(x, wk)).transpose(-1, -2)) *
                (1.0 / std::sqrt(static_cast<double>(D))),
            -1),
        0.1);
    const Tensor ctx =
        lt::matmul(probs, heads(lt::linear(x, wv))).permute({0, 2, 1, 3}).reshape({B, S, H});
    const Tensor h = lt::layer_norm(x + lt::linear(ctx, wo), {H}, ln_w, ln_b);
    const Tensor out = h + lt::linear(lt::gelu(lt::linear(h, w1)), w2);
    const Tensor loss = lt::cross_entropy(lt::linear(out, wout).reshape({-1, V}), targets);
    opt.zero_grad();
    loss.backward();
    opt.step();
    lt::mark_step();
    losses.push_back(loss.item());
    if (step == 0) lt::metrics::reset();
  }
  EXPECT_EQ(counter("UncachedCompile"), 0) << lt::last_recompile_reason();
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << "first " << losses.front();
}

class NnErrors : public lt_test::EngineTest {};

TEST_F(NnErrors, BadShapesAndIdsNameTheOpAndLeaveTensorsIntact) {
  const Tensor a = lt::ones({2, 3}), b = lt::ones({4, 5});
  expect_mentions(error_message([&] { lt::matmul(a, b); }), {"matmul", "[2, 3]", "[4, 5]"});
  expect_mentions(error_message([&] { lt::matmul(a, lt::ones({3}, DType::f64)); }),
                  {"matmul", "dtype"});
  expect_mentions(error_message([&] { lt::linear(a, lt::ones({4, 2})); }), {"linear", "[2, 3]"});
  expect_mentions(error_message([&] { lt::cat({a, b}, 0); }), {"cat", "[4, 5]"});
  expect_mentions(error_message([&] { a.reshape({4, 2}); }), {"reshape", "[4, 2]", "6"});
  expect_mentions(error_message([&] { a.t().view({6}); }), {"view", "reshape()"});
  expect_mentions(error_message([&] { a.permute({0, 0}); }), {"permute", "repeats"});
  expect_mentions(error_message([&] { lt::layer_norm(a, {2}); }), {"layer_norm", "[2, 3]"});
  expect_mentions(error_message([&] { lt::cross_entropy(a, lt::ones({2})); }),
                  {"cross_entropy", "i64"});
  expect_mentions(error_message([&] { lt::dropout(a, 1.5); }), {"dropout", "1.5"});
  expect_mentions(error_message([&] { lt::embedding(lt::ones({2}), a); }), {"embedding", "i64"});

  // Ids the host uploaded are checked at the call, as lt::IndexError naming the op, the value,
  // its position and the valid range.
  const Tensor table = lt::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor host_ids = lt::from_vector(std::vector<int64_t>{0, 2, 7, 1}, {2, 2});
  EXPECT_THROW(lt::embedding(host_ids, table), lt::IndexError);
  expect_mentions(error_message([&] { lt::embedding(host_ids, table); }),
                  {"embedding", "id 7", "position [1, 0]", "0 to 2"});
  expect_mentions(error_message([&] { table.index_select(0, host_ids.reshape({4})); }),
                  {"index_select", "index 7", "position [1, 0]"});
  // Ids computed on the device are checked when the step runs: the step fails, naming the op,
  // and the table is untouched.
  const Tensor device_ids =
      lt::from_vector(std::vector<float>{0, 1, 0, 0, 0, 0, 0, 1}, {2, 4}).argmax(1);
  const Tensor rows = lt::embedding(device_ids, table);
  expect_mentions(error_message([&] { rows.to_vector(); }),
                  {"embedding", "index 3", "position 1", "size 3"});
  // Raised once: the read raised it, so waiting for the device does not again.
  EXPECT_NO_THROW(lt::wait_device_ops());
  EXPECT_EQ(table.to_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST_F(NnErrors, AutogradMisuse) {
  Tensor w = lt::ones({2, 2}).requires_grad_();
  expect_mentions(error_message([&] { (w * 2.0).backward(); }), {"backward", "[2, 2]", "gradient"});
  expect_mentions(error_message([&] { lt::ones({1}).sum().backward(); }),
                  {"backward", "does not require grad"});
  expect_mentions(error_message([&] { w.add_(1.0); }), {"add_", "leaf", "NoGradGuard"});
  Tensor y = w * 2.0;
  expect_mentions(error_message([&] { y.mul_(3.0); }), {"mul_", "out-of-place"});
  Tensor plain = lt::ones({2, 2});
  expect_mentions(error_message([&] { plain.add_(w); }), {"add_", "out-of-place"});
  Tensor view = plain.t();
  expect_mentions(error_message([&] { view.fill_(1.0); }), {"fill_", "view"});
  expect_mentions(error_message([&] { lt::ones({2}, DType::i64).requires_grad_(); }),
                  {"requires_grad_", "floating"});
  const Tensor loss = (w * w).sum();
  loss.backward();
  expect_mentions(error_message([&] { loss.backward(); }),
                  {"backward", "released", "retain_graph"});
  // The failed calls changed nothing.
  EXPECT_EQ(w.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  EXPECT_EQ(plain.to_vector(), (std::vector<float>{1, 1, 1, 1}));
  expect_close(lt_test::widen(w.grad().to_vector()), {2, 2, 2, 2}, kF64);
  {
    const lt::NoGradGuard no_grad;
    w.add_(1.0);  // allowed, as in an optimizer
  }
  EXPECT_EQ(w.to_vector(), (std::vector<float>{2, 2, 2, 2}));
}

}  // namespace
