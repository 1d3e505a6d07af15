#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/tensor.h"

// Optimizers that trace their updates like any other ops: call step(), then lt::mark_step().
// The step counter lives on the host; every hyperparameter reaches the device through the
// scalar policy, so a learning rate that changes every step never recompiles (by default).
// The constructor creates the optimizer state as zeros on the device (as optax.init does), so
// the first step traces the same graph as every later one and a run compiles its step once.
namespace lt::optim {

// Parameters with the group's hyperparameters, and either their gradients (same shapes,
// handed in) or none: then each step takes the parameters' grad() (autograd's), and skips a
// parameter whose grad() is undefined, as torch.optim does.
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  std::vector<Tensor> grads;
  Options options;
};

// How AdamW stores what it keeps and writes (`lazytensor adamw --precision`). Whatever the
// storage, the update is computed in f32 registers inside one fused kernel, and only what is
// stored is rounded.
enum class Precision {
  // Moments in the parameters' dtype, and the update computed in it (torch.optim's rule).
  fp32,
  // For bf16 or f16 parameters: f32 master weights and f32 moments (DeepSpeed's and Intel's
  // mixed precision); the parameters are the master weights rounded to nearest, written by
  // the same kernel. About as many bytes a step as fp32, half the model's weights.
  mixed,
  // bf16 moments and parameters. The parameters and second moments are rounded
  // stochastically (lt::stochastic_round), so updates far below a bf16 ulp still move the
  // weights on average and the second moment decays; the first moment is rounded to nearest.
  bf16,
  // "8bit": moments as 8-bit codes of the dynamic tree maps, block-wise quantized (Dettmers et
  // al., "8-bit Optimizers via Block-wise Quantization"), a block being a row of the parameter
  // (its trailing dims of at least 256 elements) with an f32 maximum; parameters under 4096
  // elements, 1-D, or whose rows after dim 0 have fewer than 256 elements ([30522, 128]) keep
  // f32 moments. bf16 parameters are rounded stochastically. No amsgrad.
  q8,
};
// "fp32", "mixed", "bf16", "8bit".
const char* precision_name(Precision precision);
// The inverse of precision_name; throws lt::Error for other names.
Precision parse_precision(const std::string& name);

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.0;
  bool correct_bias = true;  // HuggingFace flavour only
  bool amsgrad = false;      // torch flavour only
  // Fixed once the group's state exists (the constructor makes it): step() refuses a change.
  Precision precision = Precision::fp32;
};

class AdamW {
 public:
  // huggingface: transformers 4.6.0's AdamW (weight decay after the Adam update, eps 1e-6).
  // torch: torch.optim.AdamW (decoupled weight decay first; amsgrad available).
  enum class Flavor { huggingface, torch };

  struct State {
    int64_t step = 0;
    // Zeros from the constructor on; max_exp_avg_sq only with amsgrad (torch flavour).
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
    // Precision::mixed: the parameter's f32 master copy, taken when the state is created.
    Tensor master;
    // Precision::q8: each block's largest magnitude of exp_avg and exp_avg_sq (f32, the
    // parameter's shape with the block's dims 1); the moments hold u8 codes.
    Tensor exp_avg_absmax, exp_avg_sq_absmax;
  };

  AdamW(std::vector<ParamGroup<AdamWOptions>> groups, Flavor flavor = Flavor::huggingface);
  // As torch.optim.AdamW(params, ...): one group whose gradients are the params' grad().
  AdamW(std::vector<Tensor> params, AdamWOptions options, Flavor flavor = Flavor::torch);

  // Traced under lt::NoGradGuard: the updates are not recorded by autograd.
  void step();
  // Clears the grad() of every parameter of the autograd groups (set_to_none, torch's
  // default), or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  // Sets every group's learning rate (schedules call this each step).
  void set_lr(double lr);
  const std::vector<ParamGroup<AdamWOptions>>& groups() const { return groups_; }
  std::vector<ParamGroup<AdamWOptions>>& groups() { return groups_; }
  const State& state(size_t group, size_t param) const { return state_->at(group).at(param); }
  // For restoring a checkpoint: the tensors assigned must keep the parameter's shape.
  State& mutable_state(size_t group, size_t param) { return state_->at(group).at(param); }
  Flavor flavor() const { return flavor_; }

 private:
  // Creates the state the options ask for that does not exist yet, as device data: all of it
  // in the constructor; max_exp_avg_sq later if amsgrad is switched on through groups().
  void create_state();
  void step_quantized(const AdamWOptions& o, double t, State& s, Tensor& p, Tensor& weights,
                      const Tensor& grad, DType compute);

  std::vector<ParamGroup<AdamWOptions>> groups_;
  // Shared with the undo of a step that fails (lt::on_step_failure).
  std::shared_ptr<std::vector<std::vector<State>>> state_ =
      std::make_shared<std::vector<std::vector<State>>>();
  std::vector<Precision> state_precision_;  // per group: the precision its state was made for
  Flavor flavor_;
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// torch.optim.SGD.
class SGD {
 public:
  struct State {
    int64_t step = 0;
    Tensor momentum_buffer;  // zeros from the constructor on, with momentum only
  };

  explicit SGD(std::vector<ParamGroup<SGDOptions>> groups);
  SGD(std::vector<Tensor> params, SGDOptions options);  // gradients from the params' grad()
  void step();
  void zero_grad(bool set_to_none = true);
  void set_lr(double lr);
  const std::vector<ParamGroup<SGDOptions>>& groups() const { return groups_; }
  std::vector<ParamGroup<SGDOptions>>& groups() { return groups_; }
  const State& state(size_t group, size_t param) const { return state_->at(group).at(param); }
  // For restoring a checkpoint: the tensors assigned must keep the parameter's shape.
  State& mutable_state(size_t group, size_t param) { return state_->at(group).at(param); }

 private:
  std::vector<ParamGroup<SGDOptions>> groups_;
  // Shared with the undo of a step that fails (lt::on_step_failure).
  std::shared_ptr<std::vector<std::vector<State>>> state_ =
      std::make_shared<std::vector<std::vector<State>>>();
};

// Learning-rate schedules, as multipliers of the base rate. `step` counts optimizer steps
// already taken (0 for the first), as HuggingFace's LambdaLR schedules do.
class Schedule {
 public:
  virtual ~Schedule() = default;
  virtual double factor(int64_t step) const = 0;
  double lr(double base_lr, int64_t step) const { return base_lr * factor(step); }
};
std::unique_ptr<Schedule> constant_schedule();
// transformers.get_linear_schedule_with_warmup: 0 -> 1 over the warm-up, then down to 0.
std::unique_ptr<Schedule> linear_schedule(int64_t warmup_steps, int64_t total_steps);
// transformers.get_cosine_schedule_with_warmup.
std::unique_ptr<Schedule> cosine_schedule(int64_t warmup_steps, int64_t total_steps,
                                          double num_cycles = 0.5);
// "constant", "linear" or "cosine"; throws lt::Error for other names.
std::unique_ptr<Schedule> make_schedule(const std::string& name, int64_t warmup_steps,
                                        int64_t total_steps);

}  // namespace lt::optim

namespace lt {

// torch.nn.utils.clip_grad_norm_: scales the gradients in place so that their global L2 norm
// is at most max_norm, and returns that norm (before clipping) as a rank-0 tensor. Nothing is
// read back to the host: the step never waits for the norm.
Tensor clip_grad_norm_(std::vector<Tensor>& grads, double max_norm);

}  // namespace lt
