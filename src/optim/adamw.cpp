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
  for (const auto& group : groups_) state_.emplace_back(group.params.size());
  create_state();
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options, Flavor flavor)
    : AdamW({ParamGroup<AdamWOptions>{std::move(params), {}, options}}, flavor) {}

void AdamW::zero_grad(bool set_to_none) {
  zero_grads(groups_, set_to_none);
}

namespace {

// The dtype the moments are kept in.
DType moment_dtype(Precision precision, DType param) {
  switch (precision) {
    case Precision::fp32:
      return param;
    case Precision::mixed:
      return DType::f32;
    case Precision::bf16:
      return DType::bf16;
  }
  return param;
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
      State& s = state_[g][i];
      const DType moments = moment_dtype(o.precision, p.dtype());
      auto create = [&](Tensor& t) {
        if (t.defined()) return;
        t = zeros(p.shape(), moments);
        created.push_back(t);
      };
      if (o.precision == Precision::mixed && !s.master.defined()) {
        s.master = p.detach().to(DType::f32);
        created.push_back(s.master);
      }
      create(s.exp_avg);
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

// Applies one AdamW update to p, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad), in
// place, in their dtype: the formulas of both flavours, for every precision.
void adam_update(AdamW::Flavor flavor, const AdamWOptions& o, double t, Tensor& p,
                 const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, Tensor& max_exp_avg_sq) {
  if (flavor == AdamW::Flavor::huggingface) {
    exp_avg.mul_(o.beta1).add_(grad, 1.0 - o.beta1);
    exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
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
  exp_avg.lerp_(grad, 1.0 - o.beta1);
  exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
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

// Writes the weights and second moments of Precision::bf16: rounded stochastically where they
// are bf16, both from one draw's hash (one hash per element in the kernel).
void store_rounded(Tensor& p, const Tensor& weights, Tensor& exp_avg_sq, const Tensor& v) {
  const bool p_bf16 = p.dtype() == DType::bf16 && p.impl() != weights.impl();
  if (p_bf16) {
    auto [rounded_p, rounded_v] = trace::stochastic_round_pair(weights, v);
    p.copy_(rounded_p);
    exp_avg_sq.copy_(rounded_v);
    return;
  }
  store(p, weights);
  exp_avg_sq.copy_(stochastic_round(v));
}

}  // namespace

void AdamW::step() {
  const NoGradGuard no_grad;
  create_state();
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const AdamWOptions& o = group.options;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      const Tensor grad = gradient_of(group, i);
      if (!grad.defined()) continue;
      State& s = state_[g][i];
      ++s.step;
      const double t = static_cast<double>(s.step);
      if (o.precision == Precision::fp32) {
        adam_update(flavor_, o, t, p, grad, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq);
        continue;
      }
      // Everything in f32 registers (f64 for f64 parameters); the one fused kernel reads the
      // narrow values and rounds only what it stores.
      const DType compute = p.dtype() == DType::f64 ? DType::f64 : DType::f32;
      Tensor weights = working_copy(o.precision == Precision::mixed ? s.master : p, compute);
      Tensor exp_avg = working_copy(s.exp_avg, compute);
      Tensor exp_avg_sq = working_copy(s.exp_avg_sq, compute);
      Tensor max_exp_avg_sq = working_copy(s.max_exp_avg_sq, compute);
      adam_update(flavor_, o, t, weights, grad.to(compute), exp_avg, exp_avg_sq, max_exp_avg_sq);
      store(s.exp_avg, exp_avg);
      store(s.max_exp_avg_sq, max_exp_avg_sq);
      if (o.precision == Precision::mixed) {
        store(s.exp_avg_sq, exp_avg_sq);
        // Written, not read: into the weights' own buffer (trace::overwrite).
        trace::overwrite(p, weights);
      } else {
        // Stochastic rounding for the weights (an update below half a bf16 ulp survives on
        // average) and the second moment (with beta2 = 0.999 a step changes it by 0.1%, under
        // half a bf16 ulp: rounded to nearest it would grow but never decay). The first moment
        // changes by a tenth a step and is rounded to nearest.
        store_rounded(p, weights, s.exp_avg_sq, exp_avg_sq);
      }
    }
  }
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::mixed:
      return "mixed";
    case Precision::bf16:
      return "bf16";
  }
  return "unknown";
}

Precision parse_precision(const std::string& name) {
  for (Precision p : {Precision::fp32, Precision::mixed, Precision::bf16}) {
    if (name == precision_name(p)) return p;
  }
  throw Error("AdamW: unknown precision '" + name + "' (fp32, mixed or bf16)");
}

}  // namespace lt::optim
