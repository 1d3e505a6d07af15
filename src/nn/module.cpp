// The module base (named parameters, children, modes, state dicts) and torch.nn's basic layers.
#include <cmath>
#include <map>
#include <string>

#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/nn.h"

namespace lt::nn {

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out);
  return out;
}

void Module::collect(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, tensor] : params_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& [name, tensor] : out) tensor = tensor.detach();
  return out;
}

LoadResult Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, tensor] : state) {
    if (!given.emplace(name, &tensor).second) {
      throw Error("load_state_dict: the state names '" + name + "' twice");
    }
  }
  LoadResult result;
  NamedTensors params = named_parameters();
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::map<std::string, bool> known;
  for (auto& [name, param] : params) {
    known[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      result.missing.push_back(name);
      continue;
    }
    const Tensor& value = *it->second;
    if (!value.defined()) throw Error("load_state_dict: the value of '" + name + "' is undefined");
    if (value.shape() != param.shape()) {
      throw Error("load_state_dict: '" + name + "' has shape " + value.shape().str() +
                  " in the state but " + param.shape().str() + " in the model");
    }
    copies.emplace_back(&param, &value);
  }
  for (const auto& [name, tensor] : state) {
    if (!known.count(name)) result.unexpected.push_back(name);
  }
  if (strict && (!result.missing.empty() || !result.unexpected.empty())) {
    std::string message = "load_state_dict: the state does not fit the model:";
    if (!result.missing.empty()) message += " missing '" + result.missing.front() + "'";
    if (result.missing.size() > 1)
      message += " (and " + std::to_string(result.missing.size() - 1) + " more)";
    if (!result.unexpected.empty()) message += " unexpected '" + result.unexpected.front() + "'";
    if (result.unexpected.size() > 1) {
      message += " (and " + std::to_string(result.unexpected.size() - 1) + " more)";
    }
    throw Error(message);
  }
  const NoGradGuard no_grad;
  for (auto& [param, value] : copies) param->copy_(*value);
  return result;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& [name, param] : named_parameters()) param.mutable_grad() = Tensor();
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  if (!value.defined()) throw Error("register_parameter: '" + name + "' is undefined");
  for (const auto& [existing, tensor] : params_) {
    if (existing == name) throw Error("register_parameter: '" + name + "' is registered twice");
  }
  value.requires_grad_(true);
  params_.emplace_back(name, value);
  return value;
}

namespace {

// U(-bound, bound) from the generator.
Tensor uniform_init(const Shape& shape, double bound) {
  return rand(shape) * (2 * bound) - bound;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias,
               std::optional<double> init_std) {
  if (in_features <= 0 || out_features <= 0) {
    throw Error("Linear: sizes must be positive, got in_features " + std::to_string(in_features) +
                " and out_features " + std::to_string(out_features));
  }
  if (init_std) {
    weight = register_parameter("weight", randn(Shape{out_features, in_features}) * *init_std);
    if (with_bias) bias = register_parameter("bias", zeros(Shape{out_features}));
    return;
  }
  // torch.nn.Linear's kaiming_uniform_(a=sqrt(5)) comes to this bound for both.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform_init(Shape{out_features, in_features}, bound));
  if (with_bias) bias = register_parameter("bias", uniform_init(Shape{out_features}, bound));
}

Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight, bias);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding,
                     double init_std)
    : padding_idx(padding) {
  if (num_embeddings <= 0 || embedding_dim <= 0) {
    throw Error("Embedding: sizes must be positive, got " + std::to_string(num_embeddings) + " x " +
                std::to_string(embedding_dim));
  }
  if (padding && (*padding < -num_embeddings || *padding >= num_embeddings)) {
    throw Error("Embedding: padding_idx " + std::to_string(*padding) + " is out of range for " +
                std::to_string(num_embeddings) + " embeddings");
  }
  if (padding && *padding < 0) padding_idx = *padding + num_embeddings;
  Tensor init = randn(Shape{num_embeddings, embedding_dim}) * init_std;
  if (padding_idx) {
    init = init.masked_fill(arange(static_cast<double>(num_embeddings))
                                .eq(static_cast<double>(*padding_idx))
                                .unsqueeze(1),
                            0.0);
  }
  weight = register_parameter("weight", init);
}

Tensor Embedding::forward(const Tensor& ids) const {
  return embedding(ids, weight, padding_idx);
}

LayerNorm::LayerNorm(std::vector<int64_t> shape, double epsilon, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(epsilon) {
  if (normalized_shape.empty()) throw Error("LayerNorm: normalized_shape is empty");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(Shape(normalized_shape)));
    bias = register_parameter("bias", zeros(Shape(normalized_shape)));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

Dropout::Dropout(double probability) : p(probability) {
  if (!(p >= 0 && p <= 1)) {
    throw Error("Dropout: the probability must be between 0 and 1, got " + std::to_string(p));
  }
}

Tensor Dropout::forward(const Tensor& x) const {
  return dropout(x, p, is_training());
}

}  // namespace lt::nn
