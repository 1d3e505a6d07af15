#pragma once
#include <string>
#include <vector>

#include "lazytensor/error.h"
#include "lazytensor/optim.h"

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

}  // namespace lt::optim
