#pragma once
// Reverse-mode automatic differentiation, with libtorch's names. Every differentiable op on a
// tensor that requires grad records how to compute its inputs' gradients; backward() traces
// those gradients as more lazy ops (nothing runs until the next mark_step()), so forward,
// backward and the optimizer of a training step are one graph, compiled once.
#include <vector>

#include "lazytensor/tensor.h"

namespace lt {

// Whether ops on this thread record gradients (on by default).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Turns gradient recording off on this thread while it lives, as torch::NoGradGuard.
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// The gradients of `outputs` (weighted by `grad_outputs`; none needed for single-element
// outputs) with respect to `inputs`, which may be leaves or intermediate tensors. Leaves'
// grad() is not touched. An input that the outputs do not depend on gets an undefined tensor
// when `allow_unused`, else lt::Error. The recorded graph is released unless `retain_graph`.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

}  // namespace lt
