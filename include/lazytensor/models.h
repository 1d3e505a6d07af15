#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lazytensor/shape.h"

namespace lt::models {

struct ParameterSpec {
  std::string name;
  Shape shape;
};

// Parameter shapes of known models, in their PyTorch state_dict order:
//   "bert-large": BertModel for bert-large-uncased (391 tensors, 335,141,888 parameters)
//   "bert-base":  BertModel for bert-base-uncased (199 tensors, 109,482,240 parameters)
//   "tiny":       a 2-layer, hidden-64 BERT for tests (fast everywhere)
// Throws lt::Error for an unknown name.
std::vector<ParameterSpec> parameter_shapes(const std::string& model);
std::vector<std::string> model_names();
int64_t parameter_count(const std::vector<ParameterSpec>& specs);

}  // namespace lt::models
