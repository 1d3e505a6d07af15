#pragma once
// Modules with PyTorch's names (torch.nn): a module owns named parameters and child modules,
// switches between training and evaluation, and calls the functional ops of
// lazytensor/functional.h in forward(). Parameters are ordinary tensors that require grad, so
// autograd and the optimizers (lazytensor/optim.h) take them as they are.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lazytensor/functional.h"
#include "lazytensor/tensor.h"

namespace lt::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict did not match: names the module has that the state lacks, and names
// the state has that the module lacks.
struct LoadResult {
  std::vector<std::string> missing;
  std::vector<std::string> unexpected;
};

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;

  // Every parameter of this module and its children, depth first in registration order, with
  // dotted names ("encoder.layer.0.attention.self.query.weight"), as torch's named_parameters.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  // The parameters' values, detached (what a checkpoint stores).
  NamedTensors state_dict() const;
  // Copies each named value into the parameter of that name (under NoGradGuard, casting to
  // the parameter's dtype). Shapes must match: a mismatch throws lt::Error naming the tensor
  // before anything is copied. With `strict`, missing or unexpected names throw as well.
  LoadResult load_state_dict(const NamedTensors& state, bool strict = true);

  // Training mode (dropout active) or evaluation mode, for this module and its children.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Clears every parameter's grad(), as Optimizer.zero_grad(set_to_none=True).
  void zero_grad();

 protected:
  // Makes `value` a parameter (requiring grad) under `name`, and returns the handle kept.
  Tensor register_parameter(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out) const;

  NamedTensors params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Initial weights as torch.nn's defaults, drawn from the generator (lt::manual_seed makes them
// reproducible). Models with their own initialization (BERT's N(0, 0.02)) overwrite them.
class Linear : public Module {
 public:
  // weight [out, in] and bias [out] ~ U(-1/sqrt(in), 1/sqrt(in)); with init_std, weight ~
  // N(0, init_std^2) and bias zero instead (BERT's and GPT's initialization).
  Linear(int64_t in_features, int64_t out_features, bool bias = true,
         std::optional<double> init_std = std::nullopt);
  Tensor forward(const Tensor& x) const;  // x [..., in] -> [..., out]
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight, bias;  // bias undefined without one
};

class Embedding : public Module {
 public:
  // weight [num_embeddings, dim] ~ N(0, init_std^2), N(0, 1) by default; the padding row
  // starts at zero and gets no gradient.
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt, double init_std = 1.0);
  Tensor forward(const Tensor& ids) const;  // integer ids [...] -> [..., dim]
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  Tensor weight;
  std::optional<int64_t> padding_idx;
};

class LayerNorm : public Module {
 public:
  // weight ones and bias zeros over the trailing `normalized_shape`.
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor weight, bias;
  std::vector<int64_t> normalized_shape;
  double eps;
};

// Active in training mode only.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p;
};

}  // namespace lt::nn
