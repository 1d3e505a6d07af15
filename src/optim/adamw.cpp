#include <cmath>
#include <string>

#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "lazytensor/optim.h"
#include "optim/param_groups.h"
#include "trace/trace.h"

namespace lt::optim {

AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups, Flavor flavor)
    : groups_(std::move(groups)), flavor_(flavor) {
  check_groups("AdamW", groups_);
  for (const auto& group : groups_) state_->emplace_back(group.params.size());
  create_state();
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options, Flavor flavor)
    : AdamW({ParamGroup<AdamWOptions>{std::move(params), {}, options}}, flavor) {}

void AdamW::zero_grad(bool set_to_none) {
  zero_grads(groups_, set_to_none);
}

namespace {

// Precision::q8's quantization blocks: the trailing dims from `first` on, where first is the
// last dim whose trailing product reaches 256 elements (a row of a weight matrix: 768-4096 in
// BERT, where bitsandbytes takes 2048 flat elements; rows keep the block maxima broadcastable
// to the parameter's shape, so that one kernel in the parameter's own shape updates it). -1: the
// tensor keeps f32 moments (under 4096 elements, as bitsandbytes' min_8bit_size, or 1-D).
int block_start(const Shape& shape) {
  if (shape.numel() < 4096 || shape.rank() < 2) return -1;
  int64_t product = 1;
  for (int d = shape.rank() - 1; d >= 1; --d) {
    product *= shape[d];
    if (product >= 256) return d;
  }
  return -1;
}

bool quantized(Precision precision, const Shape& shape) {
  return precision == Precision::q8 && block_start(shape) >= 0;
}

// The dtype the moments are kept in.
DType moment_dtype(Precision precision, const Tensor& param) {
  switch (precision) {
    case Precision::fp32:
      return param.dtype();
    case Precision::mixed:
      return DType::f32;
    case Precision::bf16:
      return DType::bf16;
    case Precision::q8:
      return quantized(precision, param.shape()) ? DType::u8 : DType::f32;
  }
  return param.dtype();
}

// Precision::mixed keeps f32 masters of low-precision parameters; f32 or f64 ones have none
// to keep, and the floating dtypes are the only ones an optimizer can update.
void check_precision(const std::vector<ParamGroup<AdamWOptions>>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const DType dtype = groups[g].params[i].dtype();
      if (!dtype_is_floating(dtype)) {
        throw Error("AdamW: parameter " + std::to_string(i) + " of group " + std::to_string(g) +
                    " is " + dtype_name(dtype) + "; parameters must be floating");
      }
      if (groups[g].options.precision == Precision::q8 && groups[g].options.amsgrad) {
        throw Error("AdamW: precision 8bit has no amsgrad (group " + std::to_string(g) + ")");
      }
      if (groups[g].options.precision == Precision::mixed && dtype != DType::bf16 &&
          dtype != DType::f16) {
        throw Error(
            "AdamW: precision mixed keeps f32 master weights of bf16 or f16 parameters, "
            "but parameter " +
            std::to_string(i) + " of group " + std::to_string(g) + " is " + dtype_name(dtype) +
            " (use precision fp32)");
      }
    }
  }
}

}  // namespace

void AdamW::create_state() {
  check_precision(groups_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Precision wanted = groups_[g].options.precision;
    if (g >= state_precision_.size()) {
      state_precision_.push_back(wanted);
    } else if (state_precision_[g] != wanted) {
      throw Error(std::string("AdamW: group ") + std::to_string(g) + "'s precision changed from " +
                  precision_name(state_precision_[g]) + " to " + precision_name(wanted) +
                  " after its state was made in that precision");
    }
  }
  std::vector<Tensor> created;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const AdamWOptions& o = groups_[g].options;
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      State& s = (*state_)[g][i];
      const DType moments = moment_dtype(o.precision, p);
      // Zero moments; as 8-bit codes, the signed map's 0 is code 127 and the unsigned map's 0.
      auto create = [&](Tensor& t, double zero_code = 0) {
        if (t.defined()) return;
        t = full(p.shape(), moments == DType::u8 ? zero_code : 0.0, moments);
        created.push_back(t);
      };
      if (quantized(o.precision, p.shape()) && !s.exp_avg_absmax.defined()) {
        std::vector<int64_t> blocks = p.shape().to_vector();
        for (size_t d = static_cast<size_t>(block_start(p.shape())); d < blocks.size(); ++d) {
          blocks[d] = 1;
        }
        s.exp_avg_absmax = zeros(Shape(blocks));
        s.exp_avg_sq_absmax = zeros(Shape(blocks));
        created.push_back(s.exp_avg_absmax);
        created.push_back(s.exp_avg_sq_absmax);
      }
      if (o.precision == Precision::mixed && !s.master.defined()) {
        s.master = p.detach().to(DType::f32);
        created.push_back(s.master);
      }
      create(s.exp_avg, 127);
      create(s.exp_avg_sq);
      if (o.amsgrad && flavor_ == Flavor::torch) create(s.max_exp_avg_sq);
    }
  }
  materialize(created);
}

void AdamW::set_lr(double lr) {
  for (auto& group : groups_) group.options.lr = lr;
}

namespace {

// One AdamW step's moments, in place, in their dtype: the formulas of both flavours.
void update_moments(AdamW::Flavor flavor, const AdamWOptions& o, const Tensor& grad,
                    Tensor& exp_avg, Tensor& exp_avg_sq) {
  if (flavor == AdamW::Flavor::huggingface) {
    exp_avg.mul_(o.beta1).add_(grad, 1.0 - o.beta1);
  } else {
    exp_avg.lerp_(grad, 1.0 - o.beta1);
  }
  exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
}

// One AdamW step's update of p from the new moments (and of max_exp_avg_sq with amsgrad), in
// place.
void update_weights(AdamW::Flavor flavor, const AdamWOptions& o, double t, Tensor& p,
                    const Tensor& exp_avg, const Tensor& exp_avg_sq, Tensor& max_exp_avg_sq) {
  if (flavor == AdamW::Flavor::huggingface) {
    Tensor denom = exp_avg_sq.sqrt().add_(o.eps);
    double step_size = o.lr;
    if (o.correct_bias) {
      step_size = step_size * std::sqrt(1.0 - std::pow(o.beta2, t)) / (1.0 - std::pow(o.beta1, t));
    }
    p.addcdiv_(exp_avg, denom, -step_size);
    if (o.weight_decay > 0.0) p.add_(p, -o.lr * o.weight_decay);
    return;
  }
  p.mul_(1.0 - o.lr * o.weight_decay);
  const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
  Tensor denom;
  if (o.amsgrad) {
    max_exp_avg_sq.maximum_(exp_avg_sq);
    denom = max_exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(o.eps);
  } else {
    denom = exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(o.eps);
  }
  p.addcdiv_(exp_avg, denom, -o.lr / bias_correction1);
}

// A tensor of `dtype` to compute `stored` in: stored itself when it has that dtype (then
// updated in place).
Tensor working_copy(const Tensor& stored, DType dtype) {
  return stored.defined() ? stored.to(dtype) : Tensor();
}

// Writes `value` back into `stored`, rounded to nearest, unless it is stored's own working copy.
void store(Tensor& stored, const Tensor& value) {
  if (stored.defined() && stored.impl() != value.impl()) stored.copy_(value);
}

// Writes the weights and second moments, rounded stochastically where they are bf16 (both
// from one draw's hash when both are: one hash per element in the kernel), else as they are.
void store_rounded(Tensor& p, const Tensor& weights, Tensor& exp_avg_sq, const Tensor& v) {
  const bool p_bf16 = p.dtype() == DType::bf16 && p.impl() != weights.impl();
  const bool v_bf16 = exp_avg_sq.dtype() == DType::bf16 && exp_avg_sq.impl() != v.impl();
  if (p_bf16 && v_bf16) {
    auto [rounded_p, rounded_v] = trace::stochastic_round_pair(weights, v);
    p.copy_(rounded_p);
    exp_avg_sq.copy_(rounded_v);
    return;
  }
  if (p_bf16) {
    p.copy_(stochastic_round(weights));
  } else {
    store(p, weights);
  }
  if (v_bf16) {
    exp_avg_sq.copy_(stochastic_round(v));
  } else {
    store(exp_avg_sq, v);
  }
}

}  // namespace

void AdamW::step() {
  const NoGradGuard no_grad;
  create_state();
  restore_counts_on_failure(state_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const AdamWOptions& o = group.options;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      const Tensor grad = gradient_of(group, i);
      if (!grad.defined()) continue;
      State& s = (*state_)[g][i];
      ++s.step;
      const double t = static_cast<double>(s.step);
      if (o.precision == Precision::fp32) {
        update_moments(flavor_, o, grad, s.exp_avg, s.exp_avg_sq);
        update_weights(flavor_, o, t, p, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq);
        continue;
      }
      // Everything in f32 registers (f64 for f64 parameters); the one fused kernel reads the
      // narrow values and rounds only what it stores.
      const DType compute = p.dtype() == DType::f64 ? DType::f64 : DType::f32;
      Tensor weights = working_copy(o.precision == Precision::mixed ? s.master : p, compute);
      if (quantized(o.precision, p.shape())) {
        step_quantized(o, t, s, p, weights, grad, compute);
        continue;
      }
      const Tensor g32 = grad.to(compute);
      Tensor exp_avg = working_copy(s.exp_avg, compute);
      Tensor exp_avg_sq = working_copy(s.exp_avg_sq, compute);
      Tensor max_exp_avg_sq = working_copy(s.max_exp_avg_sq, compute);
      update_moments(flavor_, o, g32, exp_avg, exp_avg_sq);
      update_weights(flavor_, o, t, weights, exp_avg, exp_avg_sq, max_exp_avg_sq);
      store(s.exp_avg, exp_avg);
      store(s.max_exp_avg_sq, max_exp_avg_sq);
      if (o.precision == Precision::mixed) {
        store(s.exp_avg_sq, exp_avg_sq);
        // Written, not read: into the weights' own buffer (trace::overwrite).
        trace::overwrite(p, weights);
      } else {
        // Stochastic rounding for the weights (an update below half a bf16 ulp survives on
        // average) and a bf16 second moment (with beta2 = 0.999 a step changes it by 0.1%,
        // under half a bf16 ulp: rounded to nearest it would grow but never decay). The first
        // moment changes by a tenth a step and is rounded to nearest.
        store_rounded(p, weights, s.exp_avg_sq, exp_avg_sq);
      }
    }
  }
}

// Precision::q8 for one parameter whose moments are 8-bit codes: dequantized with the block
// maxima, updated, and quantized again against the new maxima, the weights updated in the same
// kernel. The plan makes the launches one row group (a block of rows goes through all of them
// before the next): on a device that keeps a row group's row-local temporaries in scratch (the
// CPU), the moments are computed once and a block's f32 moments never leave its worker's cache;
// elsewhere (and for a parameter of one block, whose reductions make no group) they are computed
// twice from the codes, once inside the reductions that find the block maxima and once for the
// kernel that writes codes and weights, so that no f32 moment is ever stored.
void AdamW::step_quantized(const AdamWOptions& o, double t, State& s, Tensor& p, Tensor& weights,
                           const Tensor& grad, DType compute) {
  std::vector<int> block_dims;
  for (int d = block_start(p.shape()); d < p.shape().rank(); ++d) block_dims.push_back(d);
  auto moments = [&] {
    Tensor m = trace::dequantize8(s.exp_avg, false) * s.exp_avg_absmax;
    Tensor v = trace::dequantize8(s.exp_avg_sq, true) * s.exp_avg_sq_absmax;
    // The gradient's conversion too is made twice, so that no f32 copy of it is stored.
    update_moments(flavor_, o, grad.to(compute), m, v);
    return std::pair{m, v};
  };
  const auto [m_seen, v_seen] = moments();
  const Tensor m_absmax = m_seen.abs().max(block_dims, true);
  const Tensor v_absmax = v_seen.max(block_dims, true);
  // One block maximum per row of blocks: a row group needs two rows or more.
  const bool once =
      trace::keeps_row_local_temporaries(p.device()) && s.exp_avg_absmax.shape().numel() >= 2;
  auto [m, v] = once ? std::pair{m_seen, v_seen} : moments();
  Tensor no_max;
  update_weights(flavor_, o, t, weights, m, v, no_max);
  // The maxima are kept at least the smallest normal f32: a block of zeros is then multiplied by
  // a finite reciprocal (2^126) and stays 0, and the stored scale is the maximum the block was
  // normalized by, whatever it held. One inf or NaN
  // in a block makes its maximum inf or NaN, and the block's moments with it (bitsandbytes'
  // blocks behave so too); in fp32 only that element would be lost.
  constexpr double kTiny = 1.17549435e-38;
  const Tensor m_scale = m_absmax.clamp_min(kTiny);
  const Tensor v_scale = v_absmax.clamp_min(kTiny);
  // Multiplied by the maxima's reciprocals, one division a row where dividing by the maxima
  // would take one an element: the normalized moment may differ from the quotient by one f32
  // rounding, within the rounding the codes already allow at a midpoint.
  s.exp_avg.copy_(trace::quantize8(m * (1.0 / m_scale), false));
  s.exp_avg_sq.copy_(trace::quantize8(v * (1.0 / v_scale), true));
  s.exp_avg_absmax.copy_(m_scale);
  s.exp_avg_sq_absmax.copy_(v_scale);
  if (p.impl() == weights.impl()) return;
  p.copy_(p.dtype() == DType::bf16 ? stochastic_round(weights) : weights);
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::mixed:
      return "mixed";
    case Precision::bf16:
      return "bf16";
    case Precision::q8:
      return "8bit";
  }
  return "unknown";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::mixed, Precision::bf16, Precision::q8}) {
    if (name == precision_name(p)) return p;
  }
  throw Error("AdamW: unknown precision '" + name + "' (fp32, mixed, bf16 or 8bit)");
}

}  // namespace lt::optim
