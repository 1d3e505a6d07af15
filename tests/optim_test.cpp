// Optimizers, learning-rate schedules and clip_grad_norm_ against double-precision reference
// loops written here, and what an optimizer step costs: compiles, transfers and reads.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/op_semantics.h"
#include "test_support.h"
#include "trace/trace.h"

namespace {

using lt_test::counter;
using lt_test::error_message;
using lt_test::expect_close;
using lt_test::expect_mentions;
using lt_test::finish_or_exit;
using lt_test::settle;
using lt_test::Tol;
using lt_test::widen;

using lt::Shape;
using lt::Tensor;
using lt::optim::AdamW;
using lt::optim::AdamWOptions;
using lt::optim::ParamGroup;
using lt::optim::SGD;
using lt::optim::SGDOptions;
using Vec = std::vector<double>;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

constexpr Tol kF32{1e-5, 1e-5};
// For values far below 1 (second moments), where an absolute tolerance would hide any error.
constexpr Tol kRelative{1e-5, 1e-12};

// One parameter's reference state, in double precision.
struct RefParam {
  explicit RefParam(Vec start) : p(std::move(start)) {}
  Vec p, m, v, max_v;
  int64_t step = 0;
};

// transformers 4.6.0 AdamW.step for one parameter.
void hf_adamw_ref(RefParam& s, const Vec& g, const AdamWOptions& o) {
  if (s.step == 0) s.m = s.v = Vec(s.p.size(), 0.0);
  const double t = static_cast<double>(++s.step);
  double step_size = o.lr;
  if (o.correct_bias) {
    step_size *= std::sqrt(1 - std::pow(o.beta2, t)) / (1 - std::pow(o.beta1, t));
  }
  for (size_t i = 0; i < s.p.size(); ++i) {
    s.m[i] = s.m[i] * o.beta1 + g[i] * (1 - o.beta1);
    s.v[i] = s.v[i] * o.beta2 + g[i] * g[i] * (1 - o.beta2);
    s.p[i] -= step_size * s.m[i] / (std::sqrt(s.v[i]) + o.eps);
    if (o.weight_decay > 0) s.p[i] += s.p[i] * (-o.lr * o.weight_decay);
  }
}

// torch.optim.AdamW.step for one parameter.
void torch_adamw_ref(RefParam& s, const Vec& g, const AdamWOptions& o) {
  if (s.step == 0) s.m = s.v = s.max_v = Vec(s.p.size(), 0.0);
  const double t = static_cast<double>(++s.step);
  const double bias_correction1 = 1 - std::pow(o.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(o.beta2, t));
  for (size_t i = 0; i < s.p.size(); ++i) {
    s.p[i] *= 1 - o.lr * o.weight_decay;
    s.m[i] += (g[i] - s.m[i]) * (1 - o.beta1);
    s.v[i] = o.beta2 * s.v[i] + (1 - o.beta2) * g[i] * g[i];
    s.max_v[i] = std::max(s.max_v[i], s.v[i]);
    const double denom = std::sqrt(o.amsgrad ? s.max_v[i] : s.v[i]) / bias_correction2_sqrt + o.eps;
    s.p[i] -= o.lr / bias_correction1 * s.m[i] / denom;
  }
}

// torch.optim.SGD.step for one parameter; `buf` stays empty until the first momentum step.
void sgd_ref(Vec& p, Vec& buf, const Vec& g, const SGDOptions& o) {
  const bool first = buf.empty();
  if (o.momentum != 0 && first) buf.resize(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + o.weight_decay * p[i];
    if (o.momentum != 0) {
      buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

// Optimizer state as the constructor leaves it: zeros that are already device data, so that
// the first step's graph reads them as every later step's does.
void expect_zero_device_data(const Tensor& t, const Shape& shape) {
  ASSERT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), shape);
  EXPECT_FALSE(t.is_pending());
  EXPECT_EQ(t.to_vector<double>(), Vec(static_cast<size_t>(shape.numel()), 0.0));
}

class OptimTest : public lt_test::EngineTest {
 protected:
  // Two groups of parameters with per-group options; every step draws new gradients scaled by
  // the step's entry of `grad_scales`. Compares parameters and optimizer state with the
  // reference at the end.
  void check_adamw(AdamW::Flavor flavor, const std::vector<AdamWOptions>& options,
                   const std::vector<double>& grad_scales) {
    const std::vector<std::vector<Shape>> shapes = {{{3, 17}, {40}}, {{5, 7}}};
    ASSERT_EQ(options.size(), shapes.size());
    std::vector<ParamGroup<AdamWOptions>> groups(shapes.size());
    std::vector<std::vector<RefParam>> ref(shapes.size());
    for (size_t g = 0; g < shapes.size(); ++g) {
      groups[g].options = options[g];
      for (const Shape& shape : shapes[g]) {
        const std::vector<float> pv = values(shape.numel());
        groups[g].params.push_back(lt::from_vector(pv, shape));
        groups[g].grads.push_back(lt::zeros(shape));
        ref[g].emplace_back(widen(pv));
      }
    }
    // The caller's handles, as a model keeps them: the optimizer updates them in place.
    std::vector<std::vector<Tensor>> params;
    for (const auto& group : groups) params.push_back(group.params);
    AdamW optimizer(std::move(groups), flavor);
    EXPECT_EQ(optimizer.flavor(), flavor);
    for (size_t g = 0; g < shapes.size(); ++g) {
      for (size_t i = 0; i < shapes[g].size(); ++i) {
        SCOPED_TRACE("state of group " + std::to_string(g) + ", parameter " + std::to_string(i));
        const AdamW::State& state = optimizer.state(g, i);
        EXPECT_EQ(state.step, 0);
        expect_zero_device_data(state.exp_avg, shapes[g][i]);
        expect_zero_device_data(state.exp_avg_sq, shapes[g][i]);
        if (flavor == AdamW::Flavor::torch && options[g].amsgrad) {
          expect_zero_device_data(state.max_exp_avg_sq, shapes[g][i]);
        } else {
          EXPECT_FALSE(state.max_exp_avg_sq.defined());
        }
      }
    }

    const auto reference = flavor == AdamW::Flavor::huggingface ? hf_adamw_ref : torch_adamw_ref;
    for (double scale : grad_scales) {
      for (size_t g = 0; g < shapes.size(); ++g) {
        for (size_t i = 0; i < shapes[g].size(); ++i) {
          const std::vector<float> gv = values(shapes[g][i].numel(), -scale, scale);
          optimizer.groups()[g].grads[i] = lt::from_vector(gv, shapes[g][i]);
          reference(ref[g][i], widen(gv), options[g]);
        }
      }
      optimizer.step();
      lt::mark_step();
    }
    lt::wait_device_ops();

    for (size_t g = 0; g < shapes.size(); ++g) {
      for (size_t i = 0; i < shapes[g].size(); ++i) {
        SCOPED_TRACE("group " + std::to_string(g) + ", parameter " + std::to_string(i));
        expect_close(params[g][i].to_vector<double>(), ref[g][i].p, kF32);
        const AdamW::State& state = optimizer.state(g, i);
        EXPECT_EQ(state.step, static_cast<int64_t>(grad_scales.size()));
        ASSERT_TRUE(state.exp_avg.defined());
        ASSERT_TRUE(state.exp_avg_sq.defined());
        EXPECT_EQ(state.exp_avg.shape(), shapes[g][i]);
        EXPECT_EQ(state.exp_avg_sq.shape(), shapes[g][i]);
        expect_close(state.exp_avg.to_vector<double>(), ref[g][i].m, kF32);
        expect_close(state.exp_avg_sq.to_vector<double>(), ref[g][i].v, kRelative);
        if (flavor == AdamW::Flavor::torch && options[g].amsgrad) {
          ASSERT_TRUE(state.max_exp_avg_sq.defined());
          EXPECT_EQ(state.max_exp_avg_sq.shape(), shapes[g][i]);
          expect_close(state.max_exp_avg_sq.to_vector<double>(), ref[g][i].max_v, kRelative);
          // The gradients shrink, so the running maximum must have mattered.
          EXPECT_NE(ref[g][i].max_v, ref[g][i].v);
        }
      }
    }
  }
};

TEST_F(OptimTest, HuggingFaceAdamWMatchesReference) {
  for (bool correct_bias : {true, false}) {
    for (double weight_decay : {0.0, 0.1}) {
      SCOPED_TRACE("correct_bias " + std::to_string(correct_bias) + ", weight_decay " +
                   std::to_string(weight_decay));
      // The second group differs in lr, weight decay and an eps large enough to matter.
      check_adamw(AdamW::Flavor::huggingface,
                  {{.lr = 0.05, .weight_decay = weight_decay, .correct_bias = correct_bias},
                   {.lr = 0.02,
                    .eps = 1e-3,
                    .weight_decay = 3 * weight_decay,
                    .correct_bias = correct_bias}},
                  {1, 1, 1, 1, 1});
    }
  }
}

TEST_F(OptimTest, TorchAdamWMatchesReference) {
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE("amsgrad " + std::to_string(amsgrad));
    // With beta2 = 0.9 and gradients that shrink by 100x, the second moment falls and the
    // amsgrad maximum departs from it.
    check_adamw(AdamW::Flavor::torch,
                {{.lr = 0.05, .beta2 = 0.9, .weight_decay = 0.1, .amsgrad = amsgrad},
                 {.lr = 0.02, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.0, .amsgrad = amsgrad}},
                {1, 0.01, 1, 0.01, 0.001});
  }
}

// Precision::mixed: the f32 master weights follow the reference update driven by the bf16
// gradients exactly as fp32 does, the moments are f32, and the bf16 parameters are the masters
// rounded to nearest, all written by one kernel launch a step.
TEST_F(OptimTest, MixedPrecisionKeepsF32MastersOfBf16Parameters) {
  for (AdamW::Flavor flavor : {AdamW::Flavor::huggingface, AdamW::Flavor::torch}) {
    SCOPED_TRACE(flavor == AdamW::Flavor::torch ? "torch" : "huggingface");
    const std::vector<Shape> shapes = {{3, 17}, {40}, {5, 7}};
    const AdamWOptions options{
        .lr = 0.01, .weight_decay = 0.1, .precision = lt::optim::Precision::mixed};
    ParamGroup<AdamWOptions> group;
    group.options = options;
    std::vector<RefParam> ref;
    for (const Shape& shape : shapes) {
      group.params.push_back(lt::from_vector(values(shape.numel()), shape).to(lt::DType::bf16));
      group.grads.push_back(lt::zeros(shape, lt::DType::bf16));
      ref.emplace_back(group.params.back().to_vector<double>());
    }
    const std::vector<Tensor> params = group.params;
    AdamW optimizer({group}, flavor);
    const auto reference = flavor == AdamW::Flavor::huggingface ? hf_adamw_ref : torch_adamw_ref;
    int64_t launches = 0;
    for (int step = 0; step < 6; ++step) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        optimizer.groups()[0].grads[i] =
            lt::from_vector(values(shapes[i].numel()), shapes[i]).to(lt::DType::bf16);
      }
      lt::mark_step();  // the gradients are inputs of the step, as a backward pass leaves them
      for (size_t i = 0; i < shapes.size(); ++i) {
        reference(ref[i], optimizer.groups()[0].grads[i].to_vector<double>(), options);
      }
      const int64_t before = counter("KernelLaunch");
      optimizer.step();
      lt::mark_step();
      lt::wait_device_ops();
      launches = counter("KernelLaunch") - before;
    }
    EXPECT_EQ(launches, 1) << "the step is one fused launch over every parameter";
    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      const AdamW::State& state = optimizer.state(0, i);
      ASSERT_TRUE(state.master.defined());
      EXPECT_EQ(state.master.dtype(), lt::DType::f32);
      EXPECT_EQ(state.exp_avg.dtype(), lt::DType::f32);
      EXPECT_EQ(state.exp_avg_sq.dtype(), lt::DType::f32);
      EXPECT_EQ(params[i].dtype(), lt::DType::bf16);
      const Vec master = state.master.to_vector<double>();
      expect_close(master, ref[i].p, kF32);
      expect_close(state.exp_avg.to_vector<double>(), ref[i].m, kF32);
      expect_close(state.exp_avg_sq.to_vector<double>(), ref[i].v, kRelative);
      EXPECT_EQ(params[i].to_vector<double>(),
                state.master.to(lt::DType::bf16).to_vector<double>());
    }
  }
}

// Small steps on bf16 weights: rounded to nearest, an update below half a bf16 ulp is lost
// (Precision::fp32 on bf16 parameters stalls); rounded stochastically (Precision::bf16) it is
// kept on average, and the fit tracks the f32 one, as mixed precision does with its masters.
TEST_F(OptimTest, Bf16StateWithStochasticRoundingTracksFp32) {
  const int64_t n = 4096;
  const std::vector<float> start = values(n, 0.5, 1.0), target = values(n, 0.5, 1.0);
  auto final_loss = [&](lt::optim::Precision precision, lt::DType dtype) {
    Tensor w = lt::from_vector(start, {n}).to(dtype).requires_grad_();
    const Tensor t = lt::from_vector(target, {n}).to(dtype);
    // lr 1e-3 is about a quarter of the bf16 ulp of weights in [0.5, 1).
    AdamW optimizer({w}, {.lr = 1e-3, .precision = precision});
    double loss = 0;
    for (int step = 0; step < 250; ++step) {
      const Tensor diff = w - t;
      const Tensor l = (diff * diff).mean();
      l.backward();
      optimizer.step();
      optimizer.zero_grad();
      lt::mark_step();
      loss = l.to(lt::DType::f32).item();
    }
    return loss;
  };
  const double initial = [&] {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (start[i] - target[i]) * (start[i] - target[i]);
    return sum / n;
  }();
  const double fp32 = final_loss(lt::optim::Precision::fp32, lt::DType::f32);
  const double mixed = final_loss(lt::optim::Precision::mixed, lt::DType::bf16);
  const double bf16 = final_loss(lt::optim::Precision::bf16, lt::DType::bf16);
  const double nearest = final_loss(lt::optim::Precision::fp32, lt::DType::bf16);
  EXPECT_LT(fp32, 0.2 * initial);
  // Within what bf16 weights can express: a quarter ulp squared at 1 is 2.4e-6.
  EXPECT_NEAR(mixed, fp32, 0.1 * fp32 + 1e-5);
  EXPECT_NEAR(bf16, fp32, 0.1 * fp32 + 1e-5);
  EXPECT_GT(nearest, 0.9 * initial) << "rounding to nearest was expected to lose the updates";
}

// The second moment of Precision::bf16 decays when the gradients stop: each step shrinks it
// by 0.1%, under half a bf16 ulp, which only stochastic rounding keeps (on average).
TEST_F(OptimTest, Bf16SecondMomentDecays) {
  const int64_t n = 4096;
  ParamGroup<AdamWOptions> group;
  group.options = {.lr = 1e-4, .precision = lt::optim::Precision::bf16};
  group.params.push_back(lt::from_vector(values(n), {n}).to(lt::DType::bf16));
  group.grads.push_back(lt::full({n}, 1.0, lt::DType::bf16));
  AdamW optimizer({group});
  optimizer.step();
  lt::mark_step();
  optimizer.groups()[0].grads[0] = lt::zeros({n}, lt::DType::bf16);
  const int steps = 400;
  for (int step = 0; step < steps; ++step) {
    optimizer.step();
    lt::mark_step();
  }
  const Vec v = optimizer.state(0, 0).exp_avg_sq.to_vector<double>();
  double mean = 0;
  for (double x : v) mean += x / n;
  // 1e-3 after the first step, times 0.999 a step (bf16's rounding of 1e-3 aside: 2^-7).
  const double want = 1e-3 * std::pow(0.999, steps);
  EXPECT_NEAR(mean, want, want * 0.02) << "rounded to nearest it would stay at 1e-3";
}

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8), in double: the
// definition the kernels' table and code arithmetic must agree with.
std::vector<double> dynamic_map(bool is_unsigned) {
  std::vector<double> positive;
  for (int level = 0; level < 7; ++level) {
    const int k = (is_unsigned ? 2 : 1) << level;
    for (int j = 0; j < k; ++j) {
      const double lo = 0.1 + 0.9 * j / k, hi = 0.1 + 0.9 * (j + 1) / k;
      positive.push_back(std::pow(10.0, level - 6) * (lo + hi) / 2);
    }
  }
  std::vector<double> map;
  if (!is_unsigned) {
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) map.push_back(-*it);
  }
  map.push_back(0);
  map.insert(map.end(), positive.begin(), positive.end());
  map.push_back(1);
  return map;
}

// The 8-bit maps: every code's value is the map's (to f32), every value's code is itself, and
// the code of any number is a nearest one (up to f32's rounding of the midpoints between
// neighbours), on fresh numbers spread over the map's seven decades.
TEST_F(OptimTest, DynamicMapsGiveNearestCodes) {
  for (bool is_unsigned : {false, true}) {
    SCOPED_TRACE(is_unsigned ? "unsigned" : "signed");
    const std::vector<double> map = dynamic_map(is_unsigned);
    ASSERT_EQ(map.size(), 256u);
    std::vector<float> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<float>(c);
    const Tensor code_tensor = lt::from_vector(codes, {256}).to(lt::DType::u8);
    const Vec value = lt::trace::dequantize8(code_tensor, is_unsigned).to_vector<double>();
    for (int c = 0; c < 256; ++c) ASSERT_EQ(value[c], static_cast<float>(map[c])) << c;
    const Vec round_trip =
        lt::trace::quantize8(lt::from_vector(value, {256}), is_unsigned).to_vector<double>();
    for (int c = 0; c < 256; ++c) ASSERT_EQ(round_trip[c], c) << value[c];

    std::vector<float> x = values(4096, is_unsigned ? 0 : -1, 1);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] *= static_cast<float>(std::pow(10.0, -double(i % 8)));
    x.insert(x.end(), {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1e-9f, -1e-9f});
    const auto n = static_cast<int64_t>(x.size());
    const Vec code = lt::trace::quantize8(lt::from_vector(x, {n}), is_unsigned).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = is_unsigned ? std::max<double>(x[i], 0) : x[i];
      double nearest = INFINITY;
      for (double m : map) nearest = std::min(nearest, std::fabs(m - want));
      const double got = map[static_cast<size_t>(code[i])];
      ASSERT_LE(std::fabs(got - want), nearest + 1e-6 * std::fabs(want) + 1e-12)
          << x[i] << " took code " << code[i] << " (" << got << ")";
    }
  }
}

// The code arithmetic itself, on the host, over far more numbers than a kernel test takes: every
// f32 within 64 ulps of each midpoint between neighbouring values, and every 4093rd f32 bit
// pattern. Each gets the nearest code, or its neighbour only where it lies between the exact
// midpoint and that midpoint rounded to f32; at a midpoint as f32 rounds it, the code nearer 0.
// Beyond the map's ends (and at infinity) the end codes, NaN 0; no bucket holds two midpoints.
TEST_F(OptimTest, DynamicMapCodesAreNearestForEveryKindOfF32) {
  for (bool is_unsigned : {false, true}) {
    SCOPED_TRACE(is_unsigned ? "unsigned" : "signed");
    const std::vector<double> map = dynamic_map(is_unsigned);
    auto code_of = [&](float x) {
      return static_cast<int>(is_unsigned ? lt_kernel::lt_dynamic8_code<true>(x)
                                          : lt_kernel::lt_dynamic8_code<false>(x));
    };
    auto check = [&](float x) {
      const int code = code_of(x);
      if (std::isnan(x)) return code == 0;
      const double want = is_unsigned ? std::max<double>(x, 0) : x;
      if (want >= 1) return code == 255;
      if (want <= map.front()) return code == 0;  // signed: no -1, the largest negative level
      if (code < 0 || code > 255) return false;
      const auto above = std::lower_bound(map.begin(), map.end(), want) - map.begin();
      const int64_t nearest =
          above == 0 || map[above] - want < want - map[above - 1] ? above : above - 1;
      const double got_distance = std::fabs(map[code] - want);
      if (got_distance <= std::fabs(map[nearest] - want)) return true;
      if (std::abs(code - nearest) != 1) return false;
      const double midpoint = (map[code] + map[nearest]) / 2;
      const double rounded = static_cast<float>(midpoint);
      return want >= std::min(midpoint, rounded) && want <= std::max(midpoint, rounded);
    };
    std::vector<double> midpoints;
    for (size_t c = 0; c + 1 < map.size(); ++c) {
      const double midpoint = (map[c] + map[c + 1]) / 2;
      midpoints.push_back(midpoint);
      // At the midpoint as f32: the neighbour nearer 0.
      const float tie = static_cast<float>(midpoint);
      ASSERT_EQ(code_of(tie), static_cast<int>(midpoint > 0 ? c : c + 1)) << tie;
      float x = tie;
      for (int i = 0; i < 64; ++i) x = std::nextafter(x, -INFINITY);
      for (int i = 0; i < 128; ++i, x = std::nextafter(x, INFINITY)) {
        ASSERT_TRUE(check(x)) << x << " took code " << code_of(x);
      }
    }
    for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
      const auto pattern = static_cast<uint32_t>(bits);
      float x;
      std::memcpy(&x, &pattern, sizeof x);
      ASSERT_TRUE(check(x)) << x << " took code " << code_of(x);
    }
    for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1e30f, -1e30f, INFINITY, -INFINITY, NAN,
                    1e-30f, -1e-30f, 1e-40f, -1e-40f}) {
      ASSERT_TRUE(check(x)) << x << " took code " << code_of(x);
    }
    // The buckets' premise: at most one midpoint (as f32) in each.
    std::vector<int> per_bucket(lt_kernel::kLtBuckets);
    for (double midpoint : midpoints) {
      if (midpoint < 0) continue;  // the signed map's negative side mirrors its positive one
      const float m = static_cast<float>(midpoint);
      uint32_t bits;
      std::memcpy(&bits, &m, sizeof bits);
      const int64_t bucket =
          int64_t{bits >> lt_kernel::kLtBucketLowBits} - lt_kernel::kLtFirstBucket;
      ASSERT_GE(bucket, 1) << midpoint;
      ASSERT_LT(bucket, lt_kernel::kLtBuckets) << midpoint;
      EXPECT_LE(++per_bucket[bucket], 1) << "bucket " << bucket;
    }
  }
}

// Precision::q8: the moments are u8 codes with an f32 maximum per row; dequantized, they stay
// within the dynamic map's resolution of the moments an fp32 optimizer computes from the same
// gradients, the weights follow fp32's, small tensors keep f32 moments (and then compute what
// fp32 computes), and the step runs in a few launches with no recompiles.
TEST_F(OptimTest, EightBitMomentsTrackFp32) {
  const Shape shape{24, 300}, small{40};
  auto make = [&](lt::optim::Precision precision, lt::DType dtype, const std::vector<float>& w,
                  const std::vector<float>& b) {
    ParamGroup<AdamWOptions> group;
    group.options = {.lr = 1e-2, .weight_decay = 0.01, .precision = precision};
    group.params = {lt::from_vector(w, shape).to(dtype), lt::from_vector(b, small).to(dtype)};
    group.grads = {lt::zeros(shape, dtype), lt::zeros(small, dtype)};
    return group;
  };
  const std::vector<float> w = values(shape.numel()), b = values(small.numel());
  AdamW eight({make(lt::optim::Precision::q8, lt::DType::f32, w, b)});
  AdamW fp32({make(lt::optim::Precision::fp32, lt::DType::f32, w, b)});
  EXPECT_EQ(eight.state(0, 0).exp_avg.dtype(), lt::DType::u8);
  EXPECT_EQ(eight.state(0, 0).exp_avg_absmax.shape(), (Shape{24, 1}));
  EXPECT_EQ(eight.state(0, 1).exp_avg.dtype(), lt::DType::f32);  // under 4096 elements
  EXPECT_FALSE(eight.state(0, 1).exp_avg_absmax.defined());
  // Dequantized moments of the 8-bit state, and the block maxima they are relative to.
  auto moments = [&] {
    const AdamW::State& q = eight.state(0, 0);
    return std::array<Vec, 4>{
        (lt::trace::dequantize8(q.exp_avg, false) * q.exp_avg_absmax).to_vector<double>(),
        (lt::trace::dequantize8(q.exp_avg_sq, true) * q.exp_avg_sq_absmax).to_vector<double>(),
        q.exp_avg_absmax.to_vector<double>(), q.exp_avg_sq_absmax.to_vector<double>()};
  };
  // Half the widest spacing of each map, relative to the block maximum: the top level holds 64
  // (signed) or 128 (unsigned) midpoints of steps of 0.9 / k, so a nearest code is within
  // 0.9 / 128 (or 0.9 / 256) of the block maximum; 1e-6 more covers f32's rounding.
  const double m_half_spacing = 0.9 / 128 + 1e-6, v_half_spacing = 0.9 / 256 + 1e-6;
  Vec m_prev(shape.numel(), 0.0), v_prev(shape.numel(), 0.0);
  // The worst error against fp32's moments that the quantizations of all steps so far allow:
  // each step adds its own and decays the older ones by beta.
  std::vector<double> m_bound(shape[0], 0.0), v_bound(shape[0], 0.0);
  int64_t launches = 0, compiles = 0;
  for (int step = 0; step < 8; ++step) {
    // Rows of different scales, as a weight matrix's gradients have.
    std::vector<float> gw = values(shape.numel());
    for (int64_t i = 0; i < shape.numel(); ++i) gw[i] *= std::pow(10.0f, (i / 300) % 4 - 2.0f);
    const std::vector<float> gb = values(small.numel());
    for (AdamW* o : {&eight, &fp32}) {
      o->groups()[0].grads = {lt::from_vector(gw, shape), lt::from_vector(gb, small)};
    }
    lt::mark_step();
    const int64_t launches_before = counter("KernelLaunch");
    const int64_t compiles_before = counter("UncachedCompile");
    eight.step();
    lt::mark_step();
    lt::wait_device_ops();
    launches = counter("KernelLaunch") - launches_before;
    if (step > 0) compiles += counter("UncachedCompile") - compiles_before;
    fp32.step();
    lt::mark_step();
    // Each step's new moments are the nearest codes of the exact update of the previous
    // (dequantized) ones.
    const auto [m, v, m_max, v_max] = moments();
    for (int64_t i = 0; i < shape.numel(); ++i) {
      const double g = gw[i];
      const double m_exact = 0.9 * m_prev[i] + 0.1 * g;
      const double v_exact = 0.999 * v_prev[i] + 0.001 * g * g;
      ASSERT_NEAR(m[i], m_exact, m_half_spacing * m_max[i / 300]) << "step " << step << ", " << i;
      ASSERT_NEAR(v[i], v_exact, v_half_spacing * v_max[i / 300]) << "step " << step << ", " << i;
    }
    for (int64_t row = 0; row < shape[0]; ++row) {
      m_bound[row] = 0.9 * m_bound[row] + m_half_spacing * m_max[row];
      v_bound[row] = 0.999 * v_bound[row] + v_half_spacing * v_max[row];
    }
    m_prev = m;
    v_prev = v;
  }
  // The moments (computed once: the CPU keeps them in its row group's scratch), the block
  // maxima, one small kernel clamping them (away from 0, to divide by), the update, and the
  // small tensor's update.
  EXPECT_LE(launches, 6);
  EXPECT_EQ(compiles, 0);
  // The quantization errors compound, but no further than the bound.
  const AdamW::State& f = fp32.state(0, 0);
  const Vec m_ref = f.exp_avg.to_vector<double>(), v_ref = f.exp_avg_sq.to_vector<double>();
  for (int64_t i = 0; i < shape.numel(); ++i) {
    ASSERT_NEAR(m_prev[i], m_ref[i], m_bound[i / 300]) << i;
    ASSERT_NEAR(v_prev[i], v_ref[i], v_bound[i / 300]) << i;
  }
  const Vec p = eight.groups()[0].params[0].to_vector<double>();
  const Vec p_ref = fp32.groups()[0].params[0].to_vector<double>();
  double worst = 0;
  for (int64_t i = 0; i < shape.numel(); ++i) worst = std::max(worst, std::fabs(p[i] - p_ref[i]));
  EXPECT_LT(worst, 8 * 1e-2 * 0.1) << "8 steps of lr 1e-2 moved the weights by at most 0.08";
  expect_close(eight.groups()[0].params[1].to_vector<double>(),
               fp32.groups()[0].params[1].to_vector<double>(), kF32);
}

// Precision::q8 on the CPU is one row group a step: the moments, computed once and kept in the
// group's scratch (never in device memory), the block maxima, their scales and the update run
// block of rows by block of rows, each tensor apart. Its codes, maxima and weights are those of
// the same steps with row groups off (the moments computed twice, launch by launch), bit for
// bit; and after the first step it allocates nothing but its arena: the new codes take over the
// old codes' buffers, which only the group's moments kernel reads.
TEST_F(OptimTest, EightBitStepInOneRowGroupMatchesLaunchByLaunch) {
  const lt_test::Restore restore([] { lt::set_row_groups(true); });
  // Other devices run the launches one by one, the moments computed twice: the same bits.
  const bool cpu = lt::default_device().type == lt::DeviceType::cpu;
  const std::vector<Shape> shapes = {{24, 300}, {40, 512}, {6, 4, 256}};
  auto make = [&] {
    ParamGroup<AdamWOptions> group;
    group.options = {.lr = 1e-2, .weight_decay = 0.01, .precision = lt::optim::Precision::q8};
    uint64_t seed = 7;
    for (const Shape& shape : shapes) {
      group.params.push_back(lt::randn(shape, seed++).to(lt::DType::bf16));
      group.grads.push_back(lt::zeros(shape, lt::DType::bf16));
    }
    return AdamW({group});
  };
  AdamW grouped = make(), by_launch = make();
  std::vector<int64_t> allocations;
  for (int step = 0; step < 4; ++step) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < shapes.size(); ++i) {
      grads.push_back((lt::randn(shapes[i], 100 + step * 10 + i) * 1e-2).to(lt::DType::bf16));
    }
    grouped.groups()[0].grads = grads;
    by_launch.groups()[0].grads = grads;
    lt::mark_step();
    lt::wait_device_ops();
    // Both steps draw the same random bits for their weights' stochastic rounding.
    const lt::GeneratorState draws = lt::generator_state();
    for (bool rows : {true, false}) {
      lt::set_row_groups(rows);
      lt::set_generator_state(draws);
      lt::metrics::reset();
      (rows ? grouped : by_launch).step();
      lt::mark_step();
      lt::wait_device_ops();
      EXPECT_EQ(counter("RowGroupLaunch"), rows && cpu ? 1 : 0);
      if (rows) allocations.push_back(counter("DeviceAllocation"));
    }
  }
  // One buffer a step, the step's arena (the launch-by-launch steps had two more a tensor).
  if (cpu) {
    EXPECT_LE(allocations[2], 1);
    EXPECT_LE(allocations[3], 1);
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE(shapes[i].str());
    const AdamW::State& a = grouped.state(0, i);
    const AdamW::State& b = by_launch.state(0, i);
    EXPECT_EQ(a.exp_avg.dtype(), lt::DType::u8);
    EXPECT_EQ(a.exp_avg.to_vector<double>(), b.exp_avg.to_vector<double>());
    EXPECT_EQ(a.exp_avg_sq.to_vector<double>(), b.exp_avg_sq.to_vector<double>());
    EXPECT_EQ(a.exp_avg_absmax.to_vector<double>(), b.exp_avg_absmax.to_vector<double>());
    EXPECT_EQ(a.exp_avg_sq_absmax.to_vector<double>(), b.exp_avg_sq_absmax.to_vector<double>());
    EXPECT_EQ(grouped.groups()[0].params[i].to_vector<double>(),
              by_launch.groups()[0].params[i].to_vector<double>());
  }
}

TEST_F(OptimTest, PrecisionsAreNamedAndChecked) {
  for (auto p : {lt::optim::Precision::fp32, lt::optim::Precision::mixed,
                 lt::optim::Precision::bf16, lt::optim::Precision::q8}) {
    EXPECT_EQ(lt::optim::parse_precision(lt::optim::precision_name(p)), p);
  }
  expect_mentions(error_message([] { (void)lt::optim::parse_precision("fp8"); }),
                  {"precision", "fp8"});
  Tensor w = lt::zeros({3}).requires_grad_();
  expect_mentions(error_message([&] { AdamW({w}, {.precision = lt::optim::Precision::mixed}); }),
                  {"AdamW", "mixed", "f32"});
  AdamW optimizer({w}, {.precision = lt::optim::Precision::bf16});
  optimizer.groups()[0].options.precision = lt::optim::Precision::fp32;
  expect_mentions(error_message([&] { optimizer.step(); }), {"AdamW", "precision", "bf16", "fp32"});
}

// amsgrad switched on through groups() after some steps: the running maximum starts then, from
// zeros, and the step goes on without error.
TEST_F(OptimTest, AmsgradSwitchedOnLaterStartsItsMaximumThen) {
  const Shape shape{4, 6};
  const std::vector<float> pv = values(shape.numel());
  AdamWOptions o{.lr = 0.05, .weight_decay = 0.1};
  const Tensor param = lt::from_vector(pv, shape);
  AdamW optimizer({{.params = {param}, .grads = {lt::zeros(shape)}, .options = o}},
                  AdamW::Flavor::torch);
  RefParam ref(widen(pv));
  for (int step = 0; step < 3; ++step) {
    if (step == 1) {
      EXPECT_FALSE(optimizer.state(0, 0).max_exp_avg_sq.defined());
      optimizer.groups()[0].options.amsgrad = o.amsgrad = true;
      ref.max_v.assign(ref.max_v.size(), 0.0);
    }
    const std::vector<float> gv = values(shape.numel(), -1.0 / (step + 1), 1.0 / (step + 1));
    optimizer.groups()[0].grads[0] = lt::from_vector(gv, shape);
    torch_adamw_ref(ref, widen(gv), o);
    optimizer.step();
    lt::mark_step();
  }
  expect_close(param.to_vector<double>(), ref.p, kF32);
  expect_close(optimizer.state(0, 0).max_exp_avg_sq.to_vector<double>(), ref.max_v, kRelative);
}

TEST_F(OptimTest, SGDMatchesReference) {
  // One group per configuration, so that one optimizer covers them all.
  const std::vector<SGDOptions> options = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
      {.lr = 0.2, .momentum = 0.5, .dampening = 0.5},
  };
  const Shape shape{6, 7};
  std::vector<ParamGroup<SGDOptions>> groups;
  std::vector<Tensor> params, grads;
  std::vector<Vec> ref_p, ref_buf(options.size());
  for (const SGDOptions& o : options) {
    const std::vector<float> pv = values(shape.numel());
    params.push_back(lt::from_vector(pv, shape));
    grads.push_back(lt::zeros(shape));
    groups.push_back({.params = {params.back()}, .grads = {grads.back()}, .options = o});
    ref_p.push_back(widen(pv));
  }
  SGD optimizer(std::move(groups));
  for (size_t g = 0; g < options.size(); ++g) {
    const Tensor& buf = optimizer.state(g, 0).momentum_buffer;
    if (options[g].momentum != 0) expect_zero_device_data(buf, shape);
  }
  for (int step = 0; step < 4; ++step) {
    for (size_t g = 0; g < options.size(); ++g) {
      const std::vector<float> gv = values(shape.numel());
      // In place, as autograd writes .grad: the optimizer holds the same tensor.
      grads[g].copy_(lt::from_vector(gv, shape));
      sgd_ref(ref_p[g], ref_buf[g], widen(gv), options[g]);
    }
    optimizer.step();
    lt::mark_step();
  }
  lt::wait_device_ops();
  for (size_t g = 0; g < options.size(); ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    expect_close(params[g].to_vector<double>(), ref_p[g], kF32);
    const Tensor& buf = optimizer.state(g, 0).momentum_buffer;
    ASSERT_EQ(buf.defined(), options[g].momentum != 0);
    if (buf.defined()) expect_close(buf.to_vector<double>(), ref_buf[g], kF32);
  }
}

// torch.optim.SGD's first momentum step sets the buffer to the gradient itself, whatever the
// dampening. Here the buffer starts as zeros, and its first update must still give the
// gradient exactly.
TEST_F(OptimTest, SGDFirstMomentumStepTakesTheGradientExactly) {
  const std::vector<SGDOptions> options = {
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.1, .momentum = 0.9, .dampening = 0.5},
      {.lr = 0.1, .momentum = 0.5, .dampening = 0.25, .nesterov = true},
  };
  const Shape shape{5, 9};
  std::vector<ParamGroup<SGDOptions>> groups;
  std::vector<Tensor> params;
  std::vector<std::vector<float>> gv;
  std::vector<Vec> ref_p, ref_buf(options.size());
  for (const SGDOptions& o : options) {
    const std::vector<float> pv = values(shape.numel());
    gv.push_back(values(shape.numel()));
    params.push_back(lt::from_vector(pv, shape));
    groups.push_back(
        {.params = {params.back()}, .grads = {lt::from_vector(gv.back(), shape)}, .options = o});
    ref_p.push_back(widen(pv));
  }
  SGD optimizer(std::move(groups));
  optimizer.step();
  lt::mark_step();
  for (size_t g = 0; g < options.size(); ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    sgd_ref(ref_p[g], ref_buf[g], widen(gv[g]), options[g]);
    EXPECT_EQ(optimizer.state(g, 0).momentum_buffer.to_vector(), gv[g]);
    expect_close(params[g].to_vector<double>(), ref_p[g], kF32);
  }
}

TEST_F(OptimTest, ScheduleFactorsAtKnownSteps) {
  const auto constant = lt::optim::constant_schedule();
  for (int64_t step : {0, 1, 7, 1000}) EXPECT_EQ(constant->factor(step), 1.0) << step;

  // 10 warm-up steps out of 100: 0 at the start, the peak at the end of the warm-up, 0 at the
  // end of training and after it.
  const auto linear = lt::optim::linear_schedule(10, 100);
  EXPECT_EQ(linear->factor(0), 0.0);
  EXPECT_DOUBLE_EQ(linear->factor(5), 0.5);
  EXPECT_DOUBLE_EQ(linear->factor(10), 1.0);
  EXPECT_DOUBLE_EQ(linear->factor(55), 0.5);
  EXPECT_DOUBLE_EQ(linear->factor(91), 0.1);
  EXPECT_EQ(linear->factor(100), 0.0);
  EXPECT_EQ(linear->factor(120), 0.0);
  EXPECT_DOUBLE_EQ(linear->lr(0.02, 5), 0.01);
  // Without warm-up the first step runs at the full rate.
  EXPECT_DOUBLE_EQ(lt::optim::linear_schedule(0, 10)->factor(0), 1.0);

  const auto cosine = lt::optim::cosine_schedule(10, 100);
  EXPECT_EQ(cosine->factor(0), 0.0);
  EXPECT_DOUBLE_EQ(cosine->factor(5), 0.5);
  EXPECT_DOUBLE_EQ(cosine->factor(10), 1.0);
  EXPECT_NEAR(cosine->factor(55), 0.5, 1e-12);  // cos(pi / 2)
  EXPECT_NEAR(cosine->factor(40), 0.5 * (1 + std::cos(M_PI / 3)), 1e-12);
  EXPECT_NEAR(cosine->factor(100), 0.0, 1e-12);
  EXPECT_NEAR(cosine->lr(0.02, 55), 0.01, 1e-14);

  // make_schedule gives the same schedules by name.
  for (int64_t step : {0, 3, 10, 42, 100}) {
    EXPECT_EQ(lt::optim::make_schedule("constant", 10, 100)->factor(step), 1.0);
    EXPECT_EQ(lt::optim::make_schedule("linear", 10, 100)->factor(step), linear->factor(step));
    EXPECT_EQ(lt::optim::make_schedule("cosine", 10, 100)->factor(step), cosine->factor(step));
  }
}

TEST_F(OptimTest, MakeScheduleRejectsUnknownNames) {
  for (const std::string name : {"bogus", "Linear", ""}) {
    expect_mentions(error_message([&] { lt::optim::make_schedule(name, 1, 10); }),
                    {"make_schedule", "'" + name + "'"});
  }
}

TEST_F(OptimTest, ClipGradNormNeverReadsBackDuringTheStep) {
  const std::vector<Shape> shapes = {{32, 40}, {31}, {2, 3, 5}};
  // A max_norm of half the norm clips by about 2; twice the norm leaves the gradients alone.
  for (double fraction : {0.5, 2.0}) {
    SCOPED_TRACE("max_norm = " + std::to_string(fraction) + " x norm");
    std::vector<Tensor> params, grads;
    std::vector<Vec> pv, gv;
    double sum_sq = 0;
    for (const Shape& shape : shapes) {
      pv.push_back(widen(values(shape.numel())));
      gv.push_back(widen(values(shape.numel())));
      params.push_back(lt::from_vector(pv.back(), shape));
      grads.push_back(lt::from_vector(gv.back(), shape));
      for (double g : gv.back()) sum_sq += g * g;
    }
    const double norm = std::sqrt(sum_sq);
    const double max_norm = fraction * norm;
    const double coef = std::min(1.0, max_norm / (norm + 1e-6));
    SGD optimizer({{.params = params, .grads = grads, .options = {.lr = 0.1}}});
    settle();

    // A training step: clip, update, cut. The optimizer sees the clipped gradients through the
    // handles it shares with `grads`.
    const Tensor total_norm = lt::clip_grad_norm_(grads, max_norm);
    optimizer.step();
    lt::mark_step();
    EXPECT_EQ(counter("TransferFromDevice"), 0);
    finish_or_exit(120);

    EXPECT_EQ(total_norm.dim(), 0);
    EXPECT_NEAR(total_norm.item(), norm, 1e-5 * norm);
    for (size_t i = 0; i < shapes.size(); ++i) {
      Vec clipped = gv[i];
      Vec updated = pv[i];
      for (size_t k = 0; k < clipped.size(); ++k) {
        clipped[k] *= coef;
        updated[k] -= 0.1 * clipped[k];
      }
      expect_close(grads[i].to_vector<double>(), clipped, kF32);
      expect_close(params[i].to_vector<double>(), updated, kF32);
    }
  }
}

// One optimizer in a training loop, with PyTorch's update for it in double precision.
struct Trainer {
  std::function<void(double lr)> set_lr;
  std::function<void()> step;
  std::function<void(RefParam& ref, const Vec& grad, double lr)> reference;
};
using MakeTrainer =
    std::function<Trainer(const std::vector<Tensor>& params, const std::vector<Tensor>& grads)>;

MakeTrainer adamw_trainer(AdamW::Flavor flavor, const AdamWOptions& o) {
  return [flavor, o](const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
    const auto optimizer =
        std::make_shared<AdamW>(std::vector<ParamGroup<AdamWOptions>>{{params, grads, o}}, flavor);
    const auto ref = flavor == AdamW::Flavor::huggingface ? hf_adamw_ref : torch_adamw_ref;
    return Trainer{[optimizer](double lr) { optimizer->set_lr(lr); },
                   [optimizer] { optimizer->step(); },
                   [ref, o](RefParam& s, const Vec& g, double lr) {
                     AdamWOptions now = o;
                     now.lr = lr;
                     ref(s, g, now);
                   }};
  };
}

MakeTrainer sgd_trainer(const SGDOptions& o) {
  return [o](const std::vector<Tensor>& params, const std::vector<Tensor>& grads) {
    const auto optimizer =
        std::make_shared<SGD>(std::vector<ParamGroup<SGDOptions>>{{params, grads, o}});
    return Trainer{[optimizer](double lr) { optimizer->set_lr(lr); },
                   [optimizer] { optimizer->step(); },
                   [o](RefParam& s, const Vec& g, double lr) {
                     SGDOptions now = o;
                     now.lr = lr;
                     sgd_ref(s.p, s.m, g, now);  // m: the momentum buffer
                   }};
  };
}

// A training run as a model does it: a new gradient every step, clip_grad_norm_, a learning
// rate that warms up from 0 and decays, the optimizer's step, mark_step. The optimizer's state
// exists before the first step and every scalar is a kernel argument, so the first step
// compiles the graph that every later step runs: one compile in the run, and no upload.
TEST_F(OptimTest, TrainingRunCompilesItsStepOnce) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::argument);  // the default
  constexpr int kSteps = 5;
  const auto schedule = lt::optim::linear_schedule(2, kSteps);
  constexpr double kMaxNorm = 1.0;  // well below the gradients' norm: clipping scales them
  const std::vector<std::pair<std::string, MakeTrainer>> runs = {
      {"HF AdamW", adamw_trainer(AdamW::Flavor::huggingface, {.weight_decay = 0.01})},
      {"torch AdamW", adamw_trainer(AdamW::Flavor::torch, {.weight_decay = 0.1})},
      {"torch AdamW, amsgrad",
       adamw_trainer(AdamW::Flavor::torch, {.weight_decay = 0.1, .amsgrad = true})},
      {"SGD, momentum and dampening",
       sgd_trainer({.momentum = 0.9, .dampening = 0.3, .weight_decay = 0.01})},
      {"SGD, nesterov", sgd_trainer({.momentum = 0.9, .weight_decay = 0.01, .nesterov = true})},
  };
  for (const auto& [name, make_trainer] : runs) {
    SCOPED_TRACE(name);
    const std::vector<Shape> shapes = {{5001}, {1001, 3}};
    std::vector<Tensor> params, grads;
    std::vector<RefParam> ref;
    for (const Shape& shape : shapes) {
      ref.emplace_back(widen(values(shape.numel())));
      params.push_back(lt::from_vector(ref.back().p, shape));
      grads.push_back(lt::zeros(shape));
    }
    const Trainer trainer = make_trainer(params, grads);
    settle();
    // Nothing compiled earlier (an earlier run's step) can serve this run.
    lt::clear_compile_caches();
    const size_t steps_before = lt::compiles_per_step().size();

    for (int step = 0; step < kSteps; ++step) {
      // Written in place, as autograd writes .grad: the optimizer holds the same tensors.
      std::vector<Vec> gv;
      double sum_sq = 0;
      for (size_t i = 0; i < shapes.size(); ++i) {
        gv.push_back(widen(values(shapes[i].numel())));
        grads[i].copy_(lt::from_vector(gv.back(), shapes[i]));
        for (double g : gv.back()) sum_sq += g * g;
      }
      const double coef = std::min(1.0, kMaxNorm / (std::sqrt(sum_sq) + 1e-6));
      const double lr = schedule->lr(0.05, step);
      for (size_t i = 0; i < shapes.size(); ++i) {
        for (double& g : gv[i]) g *= coef;
        trainer.reference(ref[i], gv[i], lr);
      }
      trainer.set_lr(lr);
      lt::clip_grad_norm_(grads, kMaxNorm);
      trainer.step();
      lt::mark_step();
    }
    finish_or_exit(120);

    const std::vector<int64_t> per_step = lt::compiles_per_step();
    ASSERT_EQ(per_step.size(), steps_before + kSteps);
    EXPECT_EQ(std::vector<int64_t>(per_step.begin() + static_cast<std::ptrdiff_t>(steps_before),
                                   per_step.end()),
              (std::vector<int64_t>{1, 0, 0, 0, 0}))
        << lt::last_recompile_reason();
    EXPECT_EQ(counter("UncachedCompile"), 1);
    EXPECT_EQ(counter("CachedCompile"), kSteps - 1);
    EXPECT_EQ(counter("TransferToDeviceSync"), 0);
    for (size_t i = 0; i < shapes.size(); ++i) {
      SCOPED_TRACE("parameter " + std::to_string(i));
      expect_close(params[i].to_vector<double>(), ref[i].p, kF32);
    }
  }
}

TEST_F(OptimTest, MismatchedParamsAndGradsThrow) {
  const Tensor a = lt::zeros({2, 3});
  const Tensor b = lt::zeros({3, 2});
  for (AdamW::Flavor flavor : {AdamW::Flavor::huggingface, AdamW::Flavor::torch}) {
    expect_mentions(error_message([&] {
                      AdamW({{.params = {a, a}, .grads = {a}, .options = {}}}, flavor);
                    }),
                    {"AdamW", "2 parameters", "1 gradients"});
    expect_mentions(
        error_message([&] { AdamW({{.params = {a}, .grads = {b}, .options = {}}}, flavor); }),
        {"AdamW", "[2, 3]", "[3, 2]"});
  }
  expect_mentions(error_message([&] {
                    SGD({{.params = {a}, .grads = {a, a}, .options = {}}});
                  }),
                  {"SGD", "1 parameters", "2 gradients"});
  expect_mentions(error_message([&] { SGD({{.params = {a}, .grads = {b}, .options = {}}}); }),
                  {"SGD", "[2, 3]", "[3, 2]"});
  // The offending group is named.
  expect_mentions(error_message([&] {
                    SGD({{.params = {a}, .grads = {a}, .options = {}},
                         {.params = {b}, .grads = {a}, .options = {}}});
                  }),
                  {"SGD", "group 1"});
}

}  // namespace
