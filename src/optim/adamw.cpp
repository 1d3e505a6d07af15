#include <cmath>

#include "lazytensor/error.h"
#include "lazytensor/optim.h"
#include "optim/param_groups.h"

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

void AdamW::create_state() {
  std::vector<Tensor> created;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const AdamWOptions& o = groups_[g].options;
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      State& s = state_[g][i];
      auto create = [&](Tensor& t) {
        if (t.defined()) return;
        t = zeros_like(p);
        created.push_back(t);
      };
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
      if (flavor_ == Flavor::huggingface) {
        s.exp_avg.mul_(o.beta1).add_(grad, 1.0 - o.beta1);
        s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
        Tensor denom = s.exp_avg_sq.sqrt().add_(o.eps);
        double step_size = o.lr;
        if (o.correct_bias) {
          step_size =
              step_size * std::sqrt(1.0 - std::pow(o.beta2, t)) / (1.0 - std::pow(o.beta1, t));
        }
        p.addcdiv_(s.exp_avg, denom, -step_size);
        if (o.weight_decay > 0.0) p.add_(p, -o.lr * o.weight_decay);
      } else {
        p.mul_(1.0 - o.lr * o.weight_decay);
        s.exp_avg.lerp_(grad, 1.0 - o.beta1);
        s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
        const double bias_correction1 = 1.0 - std::pow(o.beta1, t);
        const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(o.beta2, t));
        Tensor denom;
        if (o.amsgrad) {
          s.max_exp_avg_sq.maximum_(s.exp_avg_sq);
          denom = s.max_exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(o.eps);
        } else {
          denom = s.exp_avg_sq.sqrt().div_(bias_correction2_sqrt).add_(o.eps);
        }
        p.addcdiv_(s.exp_avg, denom, -o.lr / bias_correction1);
      }
    }
  }
}

}  // namespace lt::optim
