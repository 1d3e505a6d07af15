#pragma once
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/error.h"
#include "lazytensor/optim.h"
#include "runtime/graph_executor.h"
#include "runtime/tensor_impl.h"

namespace lt::optim {

// Every parameter has a gradient of its shape; throws lt::Error naming the optimizer if not.
template <class Options>
inline void check_groups(const char* op, const std::vector<ParamGroup<Options>>& groups) {
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

// Computes `tensors` now, in one graph of their own, so that each is device data. Optimizer
// state made so before the first step is a device-data leaf of the first step's graph, as of
// every later step's: the step's graph is the same from the first step on. Waits until the
// device has run that graph (without taking any failure report), so that constructing an
// optimizer leaves no work in flight for whatever the caller measures next.
inline void materialize(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<std::shared_ptr<TensorImpl>> impls;
  impls.reserve(tensors.size());
  for (const Tensor& t : tensors) impls.push_back(t.impl());
  runtime::sync_tensors(impls, "optimizer state");
  std::vector<Device> devices;
  for (const Tensor& t : tensors) {
    if (std::find(devices.begin(), devices.end(), t.device()) != devices.end()) continue;
    devices.push_back(t.device());
    const DeviceGuard on(t.device());
    record_event().wait();
  }
}

}  // namespace lt::optim
