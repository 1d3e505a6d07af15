// torch.optim.AdamW(fused=True)'s kernel, _fused_adamw_, on the device: every parameter's
// update traced as engine ops, which the engine fuses into its multi-tensor kernels. The
// hyperparameters are numbers, so kernel arguments; the step counts live on the device (the
// fused path keeps them there), so the bias corrections are computed there too: nothing is
// read back and nothing recompiles as the step count grows.
#include <torch/library.h>

#include <cmath>

#include "storage.h"

namespace lazytensor_torch {
namespace {

// beta ** step for a step count on the device, computed there.
lt::Tensor power(double beta, const lt::Tensor& step) {
  return (step.to(lt::DType::f64) * std::log(beta)).exp();
}

void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                 at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                 at::TensorList state_steps, const Operand& lr, double beta1, double beta2,
                 double weight_decay, double eps, bool amsgrad, bool maximize,
                 const std::optional<at::Tensor>& grad_scale,
                 const std::optional<at::Tensor>& found_inf) {
  TORCH_CHECK(!grad_scale && !found_inf,
              "_fused_adamw_: grad_scale and found_inf (gradient "
              "scaling) are not supported on the lazytensor device");
  TORCH_CHECK(!amsgrad || max_exp_avg_sqs.size() == params.size(),
              "_fused_adamw_: amsgrad needs one max_exp_avg_sq per parameter");
  for (size_t i = 0; i < params.size(); ++i) {
    lt::Tensor p = read(params[i]);
    const lt::DType dtype = p.dtype();
    lt::Tensor g = read(grads[i]).to(dtype);
    if (maximize) g = -g;
    const lt::Tensor step = read(state_steps[i]);
    const lt::Tensor lr_value = lr.number ? lt::full({}, *lr.number, dtype) : lr.tensor.to(dtype);
    if (weight_decay != 0.0) {
      p = lr.number ? p * (1.0 - *lr.number * weight_decay) : p * (1.0 - lr_value * weight_decay);
    }
    const lt::Tensor exp_avg = read(exp_avgs[i]).lerp(g, 1.0 - beta1);
    const lt::Tensor exp_avg_sq = read(exp_avg_sqs[i]) * beta2 + g * g * (1.0 - beta2);
    lt::Tensor second = exp_avg_sq;
    if (amsgrad) {
      second = lt::maximum(read(max_exp_avg_sqs[i]), exp_avg_sq);
      write(max_exp_avg_sqs[i], second);
    }
    const lt::Tensor bias_correction1 = (1.0 - power(beta1, step)).to(dtype);
    const lt::Tensor bias_correction2_sqrt = (1.0 - power(beta2, step)).sqrt().to(dtype);
    const lt::Tensor denom = second.sqrt() / bias_correction2_sqrt + eps;
    p = p - (lr_value / bias_correction1) * (exp_avg / denom);
    write(exp_avgs[i], exp_avg);
    write(exp_avg_sqs[i], exp_avg_sq);
    write(params[i], p);
  }
}

void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                  at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                  at::TensorList state_steps, double lr, double beta1, double beta2,
                  double weight_decay, double eps, bool amsgrad, bool maximize,
                  const std::optional<at::Tensor>& grad_scale,
                  const std::optional<at::Tensor>& found_inf) {
  fused_adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
              Operand{lt::Tensor(), lr}, beta1, beta2, weight_decay, eps, amsgrad, maximize,
              grad_scale, found_inf);
}

void fused_adamw_tensor_lr_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                            at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs,
                            at::TensorList state_steps, const at::Tensor& lr, double beta1,
                            double beta2, double weight_decay, double eps, bool amsgrad,
                            bool maximize, const std::optional<at::Tensor>& grad_scale,
                            const std::optional<at::Tensor>& found_inf) {
  fused_adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps,
              operand(lr, "_fused_adamw_"), beta1, beta2, weight_decay, eps, amsgrad, maximize,
              grad_scale, found_inf);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_adamw_", fused_adamw_);
  m.impl("_fused_adamw_.tensor_lr", fused_adamw_tensor_lr_);
}

}  // namespace lazytensor_torch
