#include <cmath>

#include "lazytensor/error.h"
#include "lazytensor/optim.h"

namespace lt::optim {

namespace {

template <class Options>
void check_groups(const char* op, const std::vector<ParamGroup<Options>>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    if (group.params.size() != group.grads.size()) {
      throw Error(std::string(op) + ": group " + std::to_string(g) + " has " +
                  std::to_string(group.params.size()) + " parameters but " +
                  std::to_string(group.grads.size()) + " gradients");
    }
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (!group.params[i].defined() || !group.grads[i].defined()) {
        throw Error(std::string(op) + ": parameter " + std::to_string(i) + " of group " +
                    std::to_string(g) + " or its gradient is undefined");
      }
      if (group.params[i].shape() != group.grads[i].shape()) {
        throw Error(std::string(op) + ": parameter " + std::to_string(i) + " of group " +
                    std::to_string(g) + " has shape " + group.params[i].shape().str() +
                    " but its gradient " + group.grads[i].shape().str());
      }
    }
  }
}

}  // namespace

AdamW::AdamW(std::vector<ParamGroup<AdamWOptions>> groups, Flavor flavor)
    : groups_(std::move(groups)), flavor_(flavor) {
  check_groups("AdamW", groups_);
  for (const auto& group : groups_) state_.emplace_back(group.params.size());
}

void AdamW::set_lr(double lr) {
  for (auto& group : groups_) group.options.lr = lr;
}

void AdamW::step() {
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const AdamWOptions& o = group.options;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      const Tensor& grad = group.grads[i];
      State& s = state_[g][i];
      if (s.step == 0) {
        s.exp_avg = zeros(p.shape(), p.dtype());
        s.exp_avg_sq = zeros(p.shape(), p.dtype());
        if (o.amsgrad && flavor_ == Flavor::torch) s.max_exp_avg_sq = zeros(p.shape(), p.dtype());
      }
      ++s.step;
      const double t = static_cast<double>(s.step);
      if (flavor_ == Flavor::huggingface) {
        s.exp_avg.mul_(o.beta1).add_(grad, 1.0 - o.beta1);
        s.exp_avg_sq.mul_(o.beta2).addcmul_(grad, grad, 1.0 - o.beta2);
        Tensor denom = s.exp_avg_sq.sqrt().add_(o.eps);
        double step_size = o.lr;
        if (o.correct_bias) {
          step_size = step_size * std::sqrt(1.0 - std::pow(o.beta2, t)) / (1.0 - std::pow(o.beta1, t));
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

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : groups_(std::move(groups)) {
  check_groups("SGD", groups_);
  for (const auto& group : groups_) state_.emplace_back(group.params.size());
}

void SGD::set_lr(double lr) {
  for (auto& group : groups_) group.options.lr = lr;
}

void SGD::step() {
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const SGDOptions& o = group.options;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor d_p = group.grads[i];
      if (o.weight_decay != 0) d_p = d_p.add(p, o.weight_decay);
      if (o.momentum != 0) {
        Tensor& buf = state_[g][i].momentum_buffer;
        if (!buf.defined()) {
          buf = d_p.clone();
        } else {
          buf.mul_(o.momentum).add_(d_p, 1.0 - o.dampening);
        }
        d_p = o.nesterov ? d_p.add(buf, o.momentum) : buf;
      }
      p.add_(d_p, -o.lr);
    }
  }
}

namespace {

class ConstantSchedule final : public Schedule {
 public:
  double factor(int64_t) const override { return 1.0; }
};

class LinearSchedule final : public Schedule {
 public:
  LinearSchedule(int64_t warmup, int64_t total) : warmup_(warmup), total_(total) {}
  double factor(int64_t step) const override {
    if (step < warmup_) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
    return std::max(0.0, static_cast<double>(total_ - step) /
                             static_cast<double>(std::max<int64_t>(1, total_ - warmup_)));
  }

 private:
  int64_t warmup_, total_;
};

class CosineSchedule final : public Schedule {
 public:
  CosineSchedule(int64_t warmup, int64_t total, double cycles)
      : warmup_(warmup), total_(total), cycles_(cycles) {}
  double factor(int64_t step) const override {
    if (step < warmup_) return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
    const double progress = static_cast<double>(step - warmup_) /
                            static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * cycles_ * 2.0 * progress)));
  }

 private:
  int64_t warmup_, total_;
  double cycles_;
};

}  // namespace

std::unique_ptr<Schedule> constant_schedule() { return std::make_unique<ConstantSchedule>(); }
std::unique_ptr<Schedule> linear_schedule(int64_t warmup_steps, int64_t total_steps) {
  return std::make_unique<LinearSchedule>(warmup_steps, total_steps);
}
std::unique_ptr<Schedule> cosine_schedule(int64_t warmup_steps, int64_t total_steps,
                                          double num_cycles) {
  return std::make_unique<CosineSchedule>(warmup_steps, total_steps, num_cycles);
}
std::unique_ptr<Schedule> make_schedule(const std::string& name, int64_t warmup_steps,
                                        int64_t total_steps) {
  if (name == "constant") return constant_schedule();
  if (name == "linear") return linear_schedule(warmup_steps, total_steps);
  if (name == "cosine") return cosine_schedule(warmup_steps, total_steps);
  throw Error("make_schedule: unknown schedule '" + name + "' (expected constant, linear or cosine)");
}

}  // namespace lt::optim

namespace lt {

Tensor clip_grad_norm_(std::vector<Tensor>& grads, double max_norm) {
  if (grads.empty()) return zeros({});
  const DType dtype = grads.front().dtype();
  Tensor total_sq;
  for (const Tensor& g : grads) {
    Tensor sq = g.mul(g).sum().to(dtype);
    total_sq = total_sq.defined() ? total_sq.add(sq) : sq;
  }
  Tensor total_norm = total_sq.sqrt();
  // torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1.
  Tensor clip_coef = (max_norm / total_norm.add(1e-6)).clamp_max(1.0);
  for (Tensor& g : grads) g.mul_(clip_coef);
  return total_norm;
}

}  // namespace lt
