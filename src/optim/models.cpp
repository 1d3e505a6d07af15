#include "lazytensor/models.h"

#include "lazytensor/error.h"

namespace lt::models {

namespace {

struct BertConfig {
  int64_t vocab = 30522, max_positions = 512, type_vocab = 2;
  int64_t hidden, intermediate, layers;
};

// BertModel's parameters in state_dict order (embeddings, encoder layers, pooler).
std::vector<ParameterSpec> bert(const BertConfig& c) {
  std::vector<ParameterSpec> out;
  auto add = [&out](std::string name, Shape shape) { out.push_back({std::move(name), shape}); };
  const int64_t h = c.hidden;
  add("embeddings.word_embeddings.weight", {c.vocab, h});
  add("embeddings.position_embeddings.weight", {c.max_positions, h});
  add("embeddings.token_type_embeddings.weight", {c.type_vocab, h});
  add("embeddings.LayerNorm.weight", {h});
  add("embeddings.LayerNorm.bias", {h});
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* name : {"query", "key", "value"}) {
      add(p + "attention.self." + name + ".weight", {h, h});
      add(p + "attention.self." + name + ".bias", {h});
    }
    add(p + "attention.output.dense.weight", {h, h});
    add(p + "attention.output.dense.bias", {h});
    add(p + "attention.output.LayerNorm.weight", {h});
    add(p + "attention.output.LayerNorm.bias", {h});
    add(p + "intermediate.dense.weight", {c.intermediate, h});
    add(p + "intermediate.dense.bias", {c.intermediate});
    add(p + "output.dense.weight", {h, c.intermediate});
    add(p + "output.dense.bias", {h});
    add(p + "output.LayerNorm.weight", {h});
    add(p + "output.LayerNorm.bias", {h});
  }
  add("pooler.dense.weight", {h, h});
  add("pooler.dense.bias", {h});
  return out;
}

}  // namespace

std::vector<ParameterSpec> parameter_shapes(const std::string& model) {
  if (model == "bert-large") return bert({.hidden = 1024, .intermediate = 4096, .layers = 24});
  if (model == "bert-base") return bert({.hidden = 768, .intermediate = 3072, .layers = 12});
  if (model == "tiny") {
    return bert(
        {.vocab = 1000, .max_positions = 64, .hidden = 64, .intermediate = 256, .layers = 2});
  }
  throw Error("parameter_shapes: unknown model '" + model +
              "' (known: bert-large, bert-base, tiny)");
}

std::vector<std::string> model_names() {
  return {"tiny", "bert-base", "bert-large"};
}

int64_t parameter_count(const std::vector<ParameterSpec>& specs) {
  int64_t n = 0;
  for (const auto& spec : specs) n += spec.shape.numel();
  return n;
}

}  // namespace lt::models
