#include "lazytensor/optim.h"
#include "optim/param_groups.h"

namespace lt::optim {

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

}  // namespace lt::optim
