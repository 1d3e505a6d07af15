// Neural-network ops composed of primitive ops (their gradients follow from the primitives'),
// and dropout's counter-based generator.
#include <atomic>
#include <cmath>
#include <mutex>
#include <numbers>
#include <string>

#include "autograd/function.h"
#include "lazytensor/autocast.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "runtime/device.h"
#include "runtime/step_journal.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"

namespace lt {

namespace {

using trace::normalize_dim;
using trace::reduce_mask;

void check_floating(const char* op, const Tensor& x) {
  trace::value_of(x, op);
  if (!dtype_is_floating(x.dtype())) {
    throw Error(std::string(op) + ": expected a floating-point tensor, got " +
                dtype_name(x.dtype()));
  }
}

// x minus its max along dim. The max is a constant for the derivative: softmax and
// log-softmax do not change when a constant is subtracted, so no gradient flows through it.
Tensor shifted(const Tensor& x, int dim) {
  return x - x.max({dim}, /*keepdim=*/true).detach();
}

// The generator behind dropout: the seed and how many draws were taken.
struct Generator {
  std::mutex mu;
  GeneratorState state{0x5eed, 0};
  uint64_t journaled_step = UINT64_MAX;  // the step whose undo holds the state it began with
};
Generator& generator() {
  static Generator* g = new Generator();
  return *g;
}

constexpr uint64_t kSeedMask = (uint64_t{1} << 53) - 1;  // seeds travel as doubles

}  // namespace

// softmax, log_softmax, layer_norm and cross_entropy record one backward function each
// instead of composing their primitives' derivatives: composed, autograd would keep every
// intermediate (the exponentials, the centered input) from the forward pass to the backward
// one. These keep what PyTorch's kernels keep: the output, or the input and per-row
// statistics.
Tensor Tensor::softmax(int dim) const {
  const runtime::TraceScope scope("softmax");
  check_floating("softmax", *this);
  const int d = normalize_dim("softmax", dim, this->dim());
  Tensor y;
  {
    const NoGradGuard no_grad;
    const Tensor e = shifted(*this, d).exp();
    y = e / e.sum({d}, /*keepdim=*/true);
  }
  if (!autograd::needs_grad({this})) return y;
  return autograd::record("softmax", y, {this}, [d, y = autograd::saved(y)](const Tensor& g) {
    return autograd::Gradients{y * (g - (g * y).sum({d}, /*keepdim=*/true))};
  });
}

Tensor Tensor::log_softmax(int dim) const {
  const runtime::TraceScope scope("log_softmax");
  check_floating("log_softmax", *this);
  const int d = normalize_dim("log_softmax", dim, this->dim());
  Tensor out;
  {
    const NoGradGuard no_grad;
    // x - logsumexp(x): the shifted input x - max is read only by the sum, so it is
    // recomputed inside the reduction instead of written out ((x - max) - log(sum) would
    // materialize it: a pass over memory of the input's size, 14 of a 625 ms BERT step at its
    // [1024, 30522] logits).
    out = *this - logsumexp({d}, /*keepdim=*/true);
  }
  if (!autograd::needs_grad({this})) return out;
  return autograd::record("log_softmax", out, {this},
                          [d, out = autograd::saved(out)](const Tensor& g) {
                            return autograd::Gradients{g - out.exp() * g.sum({d}, true)};
                          });
}

Tensor softmax(const Tensor& x, int dim) {
  return x.softmax(dim);
}

Tensor log_softmax(const Tensor& x, int dim) {
  return x.log_softmax(dim);
}

Tensor Tensor::logsumexp(const std::vector<int>& dims, bool keepdim) const {
  const runtime::TraceScope scope("logsumexp");
  check_floating("logsumexp", *this);
  const uint32_t reduced = reduce_mask("logsumexp", shape(), dims);
  Tensor lse;  // keeping the reduced dims
  {
    const NoGradGuard no_grad;
    // An infinite max is not subtracted (inf - inf would be NaN): the sum of the exponentials
    // is then 0 or inf, and its log the -inf or inf the row holds. Otherwise the sum includes
    // exp(0) = 1 for the maximum, so the log never sees 0.
    const Tensor max = this->max(dims, /*keepdim=*/true);
    const Tensor shift = where(max.abs().eq(INFINITY), zeros({}, dtype()), max);
    lse = shift + (*this - shift).exp().sum(dims, /*keepdim=*/true).log();
  }
  if (autograd::needs_grad({this})) {
    lse =
        autograd::record("logsumexp", lse, {this},
                         [x = autograd::saved(*this), lse = autograd::saved(lse)](const Tensor& g) {
                           return autograd::Gradients{g * (x - lse).exp()};
                         });
  }
  if (keepdim) return lse;
  std::vector<int64_t> sizes;
  for (int d = 0; d < this->dim(); ++d) {
    if (!(reduced >> d & 1)) sizes.push_back(shape()[d]);
  }
  return lse.reshape(sizes);
}

Tensor logsumexp(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  return x.logsumexp(dims, keepdim);
}

Tensor Tensor::var(const std::vector<int>& dims, bool unbiased, bool keepdim) const {
  const runtime::TraceScope scope("var");
  check_floating("var", *this);
  const Tensor centered = *this - mean(dims, /*keepdim=*/true);
  const Tensor squares = centered * centered;
  int64_t count = 1;
  if (dims.empty()) {
    count = numel();
  } else {
    for (int d : dims) count *= shape()[normalize_dim("var", d, this->dim())];
  }
  const Tensor total = squares.sum(dims, keepdim);
  // As torch.var: with one element the unbiased variance is 0/0.
  return total / static_cast<double>(unbiased ? count - 1 : count);
}

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const Tensor& weight, const Tensor& bias, double eps) {
  const runtime::TraceScope scope("layer_norm");
  check_floating("layer_norm", x);
  const int n = static_cast<int>(normalized_shape.size());
  const Shape& s = x.shape();
  bool matches = n >= 1 && n <= s.rank();
  for (int k = 0; matches && k < n; ++k) matches = s[s.rank() - n + k] == normalized_shape[k];
  if (!matches) {
    throw Error("layer_norm: normalized_shape " +
                Shape(std::vector<int64_t>(normalized_shape)).str() +
                " is not the trailing dims of the input's shape " + s.str());
  }
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && p->shape() != Shape(std::vector<int64_t>(normalized_shape))) {
      throw Error("layer_norm: weight and bias must have shape " +
                  Shape(std::vector<int64_t>(normalized_shape)).str() + ", got " +
                  p->shape().str());
    }
  }
  std::vector<int> dims, leading;
  for (int k = 0; k < n; ++k) dims.push_back(s.rank() - n + k);
  for (int k = 0; k < s.rank() - n; ++k) leading.push_back(k);
  Tensor y, mean, rstd;
  {
    const NoGradGuard no_grad;
    mean = x.mean(dims, /*keepdim=*/true);
    const Tensor centered = x - mean;
    rstd = ((centered * centered).mean(dims, /*keepdim=*/true) + eps).rsqrt();
    y = centered * rstd;
    if (weight.defined()) y = y * weight;
    if (bias.defined()) y = y + bias;
  }
  std::vector<Tensor> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  bool any = false;
  for (const Tensor& t : inputs) any = any || autograd::needs_grad({&t});
  if (!any) return y;
  // Saved: the input and the per-row mean and 1/std, as PyTorch's kernel saves; the normalized
  // input is recomputed inside the backward kernels.
  return autograd::record(
      "layer_norm", y, inputs,
      [dims, leading, x = autograd::saved(x), mean = autograd::saved(mean),
       rstd = autograd::saved(rstd), w = weight.defined() ? autograd::saved(weight) : Tensor(),
       has_bias = bias.defined()](const Tensor& g) {
        const Tensor xhat = (x - mean) * rstd;
        const Tensor gx = w.defined() ? g * w : g;
        autograd::Gradients grads{(gx - gx.mean(dims, /*keepdim=*/true) -
                                   xhat * (gx * xhat).mean(dims, /*keepdim=*/true)) *
                                  rstd};
        // Over the rows: the sums that give the weight's and the bias's gradients.
        auto over_rows = [&](const Tensor& t) { return leading.empty() ? t : t.sum(leading); };
        if (w.defined()) grads.push_back(over_rows(g * xhat));
        if (has_bias) grads.push_back(over_rows(g));
        return grads;
      });
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  const runtime::TraceScope scope("gelu");
  check_floating("gelu", x);
  if (approximate == GeluApproximation::tanh) {
    const double k = std::sqrt(2.0 / std::numbers::pi);
    const Tensor inner = (x + x * x * x * 0.044715) * k;
    return x * 0.5 * (inner.tanh() + 1.0);
  }
  // Its derivative is computed from x alone (as PyTorch saves only the input): composed of
  // primitives, autograd would also keep erf's result, a tensor the size of BERT's widest
  // activation per layer. One op computes it, sharing erf's exp with the density's.
  Tensor out;
  {
    const NoGradGuard no_grad;
    out = x * (((x * (1.0 / std::numbers::sqrt2)).erf() + 1.0) * 0.5);
  }
  if (!autograd::needs_grad({&x})) return out;
  // Under bf16 autocast an f32 input is kept in bf16, as the product before it would have
  // returned it under PyTorch's autocast (where GELU runs on that bf16 output): half the bytes
  // kept for the backward pass and read by it, and the f32 input, computed inside the kernel
  // that applies GELU, is then not stored at all. The derivative is computed in f32.
  Tensor kept = x;
  if (x.dtype() == DType::f32 && autocast_dtype() == DType::bf16) {
    const NoGradGuard no_grad;
    kept = x.to(DType::bf16);
  }
  return autograd::record(
      "gelu", out, {&x}, [saved = autograd::saved(kept), dtype = x.dtype()](const Tensor& g) {
        const Tensor derivative = trace::make_tensor(trace::elementwise(
            "gelu", ir::OpKind::GeluDerivative, {trace::value_of(saved.to(dtype), "gelu")}));
        return autograd::Gradients{g * derivative};
      });
}

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mu);
  g.state = {seed & kSeedMask, 0};
}

GeneratorState generator_state() {
  Generator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mu);
  return g.state;
}

void set_generator_state(const GeneratorState& state) {
  Generator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mu);
  g.state = {state.seed & kSeedMask, state.offset};
}

namespace {

// The next draw of the generator: its seed and offset.
GeneratorState next_draw() {
  Generator& g = generator();
  const std::lock_guard<std::mutex> lock(g.mu);
  // A step's first draw: if the step fails, its draws are given back, so that a run that hit
  // a bad batch and went on draws what a run that skipped it draws.
  const uint64_t step = runtime::steps_cut();
  if (g.journaled_step != step) {
    g.journaled_step = step;
    runtime::on_step_failure([began = g.state] {
      Generator& same = generator();
      const std::lock_guard<std::mutex> relock(same.mu);
      same.state = began;
    });
  }
  const GeneratorState draw = g.state;
  ++g.state.offset;
  return draw;
}

// Uniform [0, 1) values of `shape` from one draw, as f64; element i reads Philox counter
// position i. Seed and offset are kernel arguments whatever the scalar policy: a new draw
// each step must not be a new graph.
ir::NodePtr uniform_values(const GeneratorState& draw, const Shape& shape, const Device& device) {
  ir::NodePtr positions = ir::make_node(ir::OpKind::Iota, DType::f64, shape, {});
  positions->device = device;
  return ir::make_node(
      ir::OpKind::Uniform, DType::f64, shape,
      {ir::make_scalar_node(ir::OpKind::Scalar, DType::f64, static_cast<double>(draw.seed)),
       ir::make_scalar_node(ir::OpKind::Scalar, DType::f64, static_cast<double>(draw.offset)),
       positions});
}

}  // namespace

// Computed on the device, inside whatever kernel uses them.
Tensor rand(const Shape& shape, DType dtype) {
  const runtime::TraceScope scope("rand");
  trace::check_dtype("rand", dtype);
  if (!dtype_is_floating(dtype)) {
    throw Error(std::string("rand: random values need a floating dtype, not ") + dtype_name(dtype));
  }
  trace::check_shape("rand", shape);
  return trace::make_tensor(
      trace::cast(uniform_values(next_draw(), shape, default_device()), dtype));
}

namespace {

// A key for the hash-based draws (stochastic rounding, dropout's masks) from the generator's
// next draw: seed and offset mixed by splitmix64 into 53 bits (the kernel holds it in a double).
double next_key() {
  const GeneratorState draw = next_draw();
  uint64_t z = draw.seed ^ (draw.offset + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11);
}

// The key as a kernel argument, whatever the scalar policy: a new one every draw.
ir::NodePtr key_argument(double key) {
  return ir::make_scalar_node(ir::OpKind::Scalar, DType::f64, key);
}

ir::NodePtr rounding_key() {
  return key_argument(next_key());
}

// `half` 0 rounds with the upper 16 of the hash's 32 bits, 1 with the lower.
Tensor round_with(const Tensor& x, const ir::NodePtr& key, int64_t half) {
  check_floating("stochastic_round", x);
  ir::NodePtr v = trace::value_of(x, "stochastic_round");
  if (v->dtype == DType::bf16) return x.detach();
  return trace::make_tensor(
      ir::make_node(ir::OpKind::StochasticRound, DType::bf16, v->shape, {v, key}, {half}));
}

}  // namespace

Tensor stochastic_round(const Tensor& x, DType dtype) {
  const runtime::TraceScope scope("stochastic_round");
  check_floating("stochastic_round", x);
  if (dtype != DType::bf16) {
    throw Error(std::string("stochastic_round: rounds to bf16 only, not ") + dtype_name(dtype));
  }
  return round_with(x, rounding_key(), 0);
}

namespace trace {

bool keeps_row_local_temporaries(const Device& device) {
  return runtime::keeps_row_local_temporaries(device);
}

Tensor dequantize8(const Tensor& codes, bool is_unsigned) {
  const runtime::TraceScope scope("dequantize8");
  ir::NodePtr c = trace::cast(trace::value_of(codes, "dequantize8"), DType::f32);
  return trace::make_tensor(
      ir::make_node(is_unsigned ? ir::OpKind::DequantizeUnsigned8 : ir::OpKind::DequantizeSigned8,
                    DType::f32, c->shape, {c}));
}

Tensor quantize8(const Tensor& normalized, bool is_unsigned) {
  const runtime::TraceScope scope("quantize8");
  ir::NodePtr x = trace::cast(trace::value_of(normalized, "quantize8"), DType::f32);
  return trace::make_tensor(trace::cast(
      ir::make_node(is_unsigned ? ir::OpKind::QuantizeUnsigned8 : ir::OpKind::QuantizeSigned8,
                    DType::f32, x->shape, {x}),
      DType::u8));
}

std::pair<Tensor, Tensor> stochastic_round_pair(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("stochastic_round");
  const ir::NodePtr key = rounding_key();
  return {round_with(a, key, 0), round_with(b, key, 1)};
}

}  // namespace trace

// The kernels have no cosine for Box-Muller, and normal draws are for initial weights (once per
// run), so they are made on the host from a seed the draw determines, then uploaded.
Tensor randn(const Shape& shape, DType dtype) {
  const GeneratorState draw = next_draw();
  return randn(shape, draw.seed * 0x9e3779b97f4a7c15ull + draw.offset, dtype);
}

Tensor dropout(const Tensor& x, double p, bool train) {
  const runtime::TraceScope scope("dropout");
  check_floating("dropout", x);
  if (!(p >= 0 && p <= 1)) {
    throw Error("dropout: the probability must be between 0 and 1, got " + std::to_string(p));
  }
  if (!train || p == 0) return x;
  if (p == 1) return x * 0.0;
  const double key = next_key();
  ir::NodePtr v = trace::value_of(x, "dropout");
  // The mask is built afresh from the same key in the backward pass rather than saved: the
  // generator recomputes it inside the kernel that uses it, so no mask is kept from the
  // forward pass to the backward one.
  auto mask = [key, p, shape = v->shape, device = *v->device, dtype = v->dtype] {
    ir::NodePtr keep = ir::make_node(
        ir::OpKind::Bernoulli, dtype, shape,
        {key_argument(key), ir::make_scalar_node(ir::OpKind::Scalar, DType::f64, 1.0 - p)});
    keep->device = device;  // its operands are numbers, which have none
    return trace::make_tensor(keep) * (1.0 / (1.0 - p));
  };
  Tensor out;
  {
    const NoGradGuard no_grad;
    out = x * mask();
  }
  if (!autograd::needs_grad({&x})) return out;
  return autograd::record("dropout", out, {&x},
                          [mask](const Tensor& g) { return autograd::Gradients{g * mask()}; });
}

namespace {

// Targets are compared with class positions, not used as addresses, so one out of range
// would add nothing to the loss. The host's ids are checked now; others by a launch before the
// loss is computed (which fails the step, committing nothing).
Tensor checked_targets(const Tensor& targets, int64_t classes, int64_t ignore_index) {
  const ir::NodePtr ids = trace::value_of(targets, "cross_entropy");
  if (trace::check_host_ids("cross_entropy", "target", ids, classes, ignore_index)) return targets;
  return trace::make_tensor(ir::make_node(ir::OpKind::CheckIndex, ids->dtype, ids->shape, {ids},
                                          {classes, ignore_index}));
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     Reduction reduction) {
  const runtime::TraceScope scope("cross_entropy");
  check_floating("cross_entropy", logits);
  trace::value_of(targets, "cross_entropy");
  if (targets.dtype() != DType::i64 && targets.dtype() != DType::i32) {
    throw Error(std::string("cross_entropy: targets must be class ids (i64 or i32), got ") +
                dtype_name(targets.dtype()));
  }
  const Shape &sl = logits.shape(), &st = targets.shape();
  const bool batched = sl.rank() == 2 && st.rank() == 1 && st[0] == sl[0];
  const bool single = sl.rank() == 1 && st.rank() == 0;
  if (!batched && !single) {
    throw Error(
        "cross_entropy: expected logits [N, C] with targets [N] (or [C] with a rank-0 "
        "target), got " +
        sl.str() + " and " + st.str());
  }
  const Tensor lg = single ? logits.unsqueeze(0) : logits;
  const int64_t classes = lg.shape()[1];
  const Tensor tg = checked_targets(single ? targets.unsqueeze(0) : targets, classes, ignore_index);
  const DType dtype = lg.dtype();
  // The target's logit, picked by comparing ids with each class's position. The one-hot
  // [N, C] is built afresh in the forward and in the backward pass, so each is fused into the
  // kernel that reads it: shared, it would be stored ([1024, 30522] f32 is 125 MB for BERT's
  // MLM head) and held from the forward pass to the backward one.
  const Tensor ids = tg.to(DType::f64).unsqueeze(1);
  const Device device = lg.device();
  auto one_hot = [classes, dtype, device](const Tensor& class_ids) {
    const DeviceGuard on(device);
    return arange(0.0, static_cast<double>(classes), 1.0, DType::f64)
        .unsqueeze(0)
        .eq(class_ids)
        .to(dtype);
  };
  // Per row: the max, the log of the sum of exp(logit - max), and nll = log_sum - (logit of
  // the target - max). The logits minus their max are not stored (each reduction computes
  // them again), and the backward pass keeps only the logits and the two statistics: the
  // gradient over the logits is then written over them.
  Tensor nll, max, log_sum;
  {
    const NoGradGuard no_grad;
    max = lg.max({1}, /*keepdim=*/true);
    log_sum = (lg - max).exp().sum({1}, /*keepdim=*/true).log();
    nll = log_sum.squeeze(1) - ((lg * one_hot(ids)).sum({1}) - max.squeeze(1));
  }
  if (autograd::needs_grad({&lg})) {
    nll = autograd::record(
        "cross_entropy", nll, {&lg},
        [logits = autograd::saved(lg), max = autograd::saved(max),
         log_sum = autograd::saved(log_sum), ids = autograd::saved(ids), one_hot](const Tensor& g) {
          const Tensor probs = ((logits - max) - log_sum).exp();
          return autograd::Gradients{g.unsqueeze(1) * (probs - one_hot(ids))};
        });
  }
  const Tensor valid = tg.to(DType::f64).ne(static_cast<double>(ignore_index)).to(dtype);
  const Tensor losses = nll * valid;
  switch (reduction) {
    case Reduction::none:
      return single ? losses.squeeze(0) : losses;
    case Reduction::sum:
      return losses.sum();
    case Reduction::mean:
      break;
  }
  return losses.sum() / valid.sum();
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const runtime::TraceScope scope("mse_loss");
  check_floating("mse_loss", input);
  const Tensor diff = input - target;
  const Tensor squares = diff * diff;
  switch (reduction) {
    case Reduction::none:
      return squares;
    case Reduction::sum:
      return squares.sum();
    case Reduction::mean:
      break;
  }
  return squares.mean();
}

}  // namespace lt
