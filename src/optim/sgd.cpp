#include "lazytensor/optim.h"
#include "optim/param_groups.h"

namespace lt::optim {

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups) : groups_(std::move(groups)) {
  check_groups("SGD", groups_);
  std::vector<Tensor> buffers;
  for (const auto& group : groups_) {
    auto& states = state_->emplace_back(group.params.size());
    if (group.options.momentum == 0) continue;
    for (size_t i = 0; i < states.size(); ++i) {
      const Tensor& p = group.params[i];
      states[i].momentum_buffer = zeros_like(p);
      buffers.push_back(states[i].momentum_buffer);
    }
  }
  materialize(buffers);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD({ParamGroup<SGDOptions>{std::move(params), {}, options}}) {}

void SGD::zero_grad(bool set_to_none) {
  zero_grads(groups_, set_to_none);
}

void SGD::set_lr(double lr) {
  for (auto& group : groups_) group.options.lr = lr;
}

void SGD::step() {
  const NoGradGuard no_grad;
  restore_counts_on_failure(state_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    auto& group = groups_[g];
    const SGDOptions& o = group.options;
    for (size_t i = 0; i < group.params.size(); ++i) {
      Tensor& p = group.params[i];
      Tensor d_p = gradient_of(group, i);
      if (!d_p.defined()) continue;
      State& s = (*state_)[g][i];
      const bool first = s.step++ == 0;
      if (o.weight_decay != 0) d_p = d_p.add(p, o.weight_decay);
      if (o.momentum != 0) {
        // Momentum switched on through groups() after construction starts from zeros too.
        if (!s.momentum_buffer.defined()) s.momentum_buffer = zeros_like(p);
        // torch: buf = d_p on the first step, then buf = momentum * buf + (1 - dampening) * d_p.
        // The buffer starts as zeros, so the first step is the same update with factors 0 and
        // 1 (exactly d_p): scalars, so the first step's graph is every later step's.
        s.momentum_buffer.mul_(first ? 0.0 : o.momentum).add_(d_p, first ? 1.0 : 1.0 - o.dampening);
        d_p = o.nesterov ? d_p.add(s.momentum_buffer, o.momentum) : s.momentum_buffer;
      }
      p.add_(d_p, -o.lr);
    }
  }
}

}  // namespace lt::optim
