#include "lazytensor/optim.h"

namespace lt {

Tensor clip_grad_norm_(std::vector<Tensor>& grads, double max_norm) {
  if (grads.empty()) return zeros({});  // torch returns a rank-0 zero too
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
