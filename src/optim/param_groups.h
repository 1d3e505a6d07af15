#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/optim.h"
#include "lazytensor/runtime.h"
#include "trace/trace.h"

namespace lt::optim {

// Step counts go back when the step that counted them fails (lt::on_step_failure). They live
// behind a shared pointer, so the undo finds them wherever the optimizer was moved to, or
// nothing once it is gone.
template <class State>
void restore_counts_on_failure(const std::shared_ptr<std::vector<std::vector<State>>>& states) {
  std::vector<std::vector<int64_t>> counts;
  for (const auto& group : *states) {
    auto& saved = counts.emplace_back();
    for (const State& s : group) saved.push_back(s.step);
  }
  on_step_failure([weak = std::weak_ptr(states), counts = std::move(counts)] {
    const auto alive = weak.lock();
    if (!alive) return;
    for (size_t g = 0; g < counts.size() && g < alive->size(); ++g) {
      for (size_t i = 0; i < counts[g].size() && i < (*alive)[g].size(); ++i) {
        (*alive)[g][i].step = counts[g][i];
      }
    }
  });
}

// Every parameter has a gradient of its shape; throws lt::Error naming the optimizer if not.
template <class Options>
inline void check_groups(const char* op, const std::vector<ParamGroup<Options>>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    const bool from_autograd = group.grads.empty();
    if (!from_autograd && group.params.size() != group.grads.size()) {
      throw Error(std::string(op) + ": group " + std::to_string(g) + " has " +
                  std::to_string(group.params.size()) + " parameters but " +
                  std::to_string(group.grads.size()) + " gradients");
    }
    for (size_t i = 0; i < group.params.size(); ++i) {
      if (!group.params[i].defined()) {
        throw Error(std::string(op) + ": parameter " + std::to_string(i) + " of group " +
                    std::to_string(g) + " is undefined");
      }
      if (from_autograd) {
        if (!group.params[i].requires_grad()) {
          throw Error(std::string(op) + ": parameter " + std::to_string(i) + " of group " +
                      std::to_string(g) +
                      " does not require grad, so it will never have a gradient (call "
                      "requires_grad_() or hand the gradients in)");
        }
        continue;
      }
      if (!group.grads[i].defined()) {
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

// The gradient of parameter i: handed in, or its grad() (undefined: skip the parameter).
template <class Options>
inline Tensor gradient_of(const ParamGroup<Options>& group, size_t i) {
  return group.grads.empty() ? group.params[i].grad() : group.grads[i];
}

template <class Options>
inline void zero_grads(std::vector<ParamGroup<Options>>& groups, bool set_to_none) {
  const NoGradGuard no_grad;
  for (auto& group : groups) {
    if (!group.grads.empty()) continue;
    for (Tensor& p : group.params) {
      Tensor& grad = p.mutable_grad();
      if (set_to_none) {
        grad = Tensor();
      } else if (grad.defined()) {
        grad.zero_();
      }
    }
  }
}

// Computes `tensors` now, in one graph of their own, so that each is device data. Optimizer
// state made so before the first step is a device-data leaf of the first step's graph, as of
// every later step's: the step's graph is the same from the first step on. Waits until the
// device has run that graph (without taking any failure report), so that constructing an
// optimizer leaves no work in flight for whatever the caller measures next.
inline void materialize(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  trace::compute_now(tensors, "optimizer state");
  std::vector<Device> devices;
  for (const Tensor& t : tensors) {
    if (std::find(devices.begin(), devices.end(), t.device()) != devices.end()) continue;
    devices.push_back(t.device());
    const DeviceGuard on(t.device());
    record_event().wait();
  }
}

}  // namespace lt::optim
