// BERT with the masked-language-model head, module for module as HuggingFace's
// BertForMaskedLM (modeling_bert.py), so that parameter names and values carry over.
#include "lazytensor/bert.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "lazytensor/error.h"
#include "lazytensor/safetensors.h"

namespace lt::models {

namespace {

using nlohmann::json;

// Children are registered under dotted paths ("attention.self.query") so that parameter names
// are HuggingFace's without a module class per level of its hierarchy.
class Embeddings : public nn::Module {
 public:
  explicit Embeddings(const BertConfig& c)
      : word(register_module("word_embeddings",
                             std::make_shared<nn::Embedding>(c.vocab_size, c.hidden_size,
                                                             c.pad_token_id, c.initializer_range))),
        position(register_module(
            "position_embeddings",
            std::make_shared<nn::Embedding>(c.max_position_embeddings, c.hidden_size, std::nullopt,
                                            c.initializer_range))),
        token_type(
            register_module("token_type_embeddings",
                            std::make_shared<nn::Embedding>(c.type_vocab_size, c.hidden_size,
                                                            std::nullopt, c.initializer_range))),
        norm(register_module("LayerNorm",
                             std::make_shared<nn::LayerNorm>(std::vector<int64_t>{c.hidden_size},
                                                             c.layer_norm_eps))),
        drop(register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob))) {}

  std::shared_ptr<nn::Embedding> word, position, token_type;
  std::shared_ptr<nn::LayerNorm> norm;
  std::shared_ptr<nn::Dropout> drop;
};

class Layer : public nn::Module {
 public:
  explicit Layer(const BertConfig& c)
      : heads(c.num_attention_heads),
        head_dim(c.hidden_size / c.num_attention_heads),
        query(linear("attention.self.query", c.hidden_size, c.hidden_size, c)),
        key(linear("attention.self.key", c.hidden_size, c.hidden_size, c)),
        value(linear("attention.self.value", c.hidden_size, c.hidden_size, c)),
        attention_out(linear("attention.output.dense", c.hidden_size, c.hidden_size, c)),
        attention_norm(norm("attention.output.LayerNorm", c)),
        intermediate(linear("intermediate.dense", c.hidden_size, c.intermediate_size, c)),
        output(linear("output.dense", c.intermediate_size, c.hidden_size, c)),
        output_norm(norm("output.LayerNorm", c)),
        attention_drop(
            register_module("attention.self.dropout",
                            std::make_shared<nn::Dropout>(c.attention_probs_dropout_prob))),
        hidden_drop(register_module("output.dropout",
                                    std::make_shared<nn::Dropout>(c.hidden_dropout_prob))) {}

  // x [B, L, H]; additive_mask [B, 1, 1, L] or undefined.
  Tensor forward(const Tensor& x, const Tensor& additive_mask) const {
    const int64_t B = x.shape()[0], L = x.shape()[1], H = x.shape()[2];
    auto split_heads = [&](const Tensor& t) {
      return t.view({B, L, heads, head_dim}).permute({0, 2, 1, 3});
    };
    const Tensor q = split_heads((*query)(x));
    const Tensor k = split_heads((*key)(x));
    const Tensor v = split_heads((*value)(x));
    Tensor scores = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(double(head_dim)));
    if (additive_mask.defined()) scores = scores + additive_mask;
    const Tensor probs = (*attention_drop)(softmax(scores, -1));
    const Tensor context = matmul(probs, v).permute({0, 2, 1, 3}).reshape({B, L, H});
    const Tensor attended = (*attention_norm)((*hidden_drop)((*attention_out)(context)) + x);
    const Tensor inner = gelu((*intermediate)(attended));
    return (*output_norm)((*hidden_drop)((*output)(inner)) + attended);
  }

  int64_t heads, head_dim;
  std::shared_ptr<nn::Linear> query, key, value, attention_out;
  std::shared_ptr<nn::LayerNorm> attention_norm;
  std::shared_ptr<nn::Linear> intermediate, output;
  std::shared_ptr<nn::LayerNorm> output_norm;
  std::shared_ptr<nn::Dropout> attention_drop, hidden_drop;

 private:
  std::shared_ptr<nn::Linear> linear(const std::string& name, int64_t in, int64_t out,
                                     const BertConfig& c) {
    return register_module(name, std::make_shared<nn::Linear>(in, out, true, c.initializer_range));
  }
  std::shared_ptr<nn::LayerNorm> norm(const std::string& name, const BertConfig& c) {
    return register_module(name, std::make_shared<nn::LayerNorm>(
                                     std::vector<int64_t>{c.hidden_size}, c.layer_norm_eps));
  }
};

class Encoder : public nn::Module {
 public:
  explicit Encoder(const BertConfig& c) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      layers.push_back(register_module("layer." + std::to_string(i), std::make_shared<Layer>(c)));
    }
  }
  std::vector<std::shared_ptr<Layer>> layers;
};

class Body : public nn::Module {
 public:
  explicit Body(const BertConfig& c)
      : embeddings(register_module("embeddings", std::make_shared<Embeddings>(c))),
        encoder(register_module("encoder", std::make_shared<Encoder>(c))) {}
  std::shared_ptr<Embeddings> embeddings;
  std::shared_ptr<Encoder> encoder;
};

class MlmHead : public nn::Module {
 public:
  explicit MlmHead(const BertConfig& c)
      : transform(register_module(
            "predictions.transform.dense",
            std::make_shared<nn::Linear>(c.hidden_size, c.hidden_size, true, c.initializer_range))),
        norm(register_module("predictions.transform.LayerNorm",
                             std::make_shared<nn::LayerNorm>(std::vector<int64_t>{c.hidden_size},
                                                             c.layer_norm_eps))),
        bias(register_parameter("predictions.bias", zeros(Shape{c.vocab_size}))) {}
  std::shared_ptr<nn::Linear> transform;
  std::shared_ptr<nn::LayerNorm> norm;
  Tensor bias;
};

}  // namespace

struct Bert::Parts {
  std::shared_ptr<Body> body;
  std::shared_ptr<MlmHead> head;
};

BertConfig BertConfig::preset(const std::string& name) {
  BertConfig c;
  c.name = name;
  if (name == "tiny") {
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
    c.intermediate_size = 256;
  } else if (name == "mini") {
    c.hidden_size = 384, c.num_hidden_layers = 6, c.num_attention_heads = 12;
    c.intermediate_size = 1536;
  } else if (name == "base") {
    // BertConfig's defaults are bert-base-uncased.
  } else if (name == "large") {
    c.hidden_size = 1024, c.num_hidden_layers = 24, c.num_attention_heads = 16;
    c.intermediate_size = 4096;
  } else {
    std::string known;
    for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error("BertConfig: unknown model '" + name + "' (known: " + known + ")");
  }
  return c;
}

std::vector<std::string> BertConfig::preset_names() {
  return {"tiny", "mini", "base", "large"};
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("BertConfig: cannot read " + path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw Error("BertConfig: " + path + " is not JSON: " + e.what());
  }
  BertConfig c;
  c.name = path;
  try {
    if (j.contains("hidden_act") && j["hidden_act"] != "gelu") {
      throw Error("BertConfig: " + path + ": hidden_act " + j["hidden_act"].dump() +
                  " is not supported (only \"gelu\", BERT's erf form)");
    }
    if (j.contains("position_embedding_type") && j["position_embedding_type"] != "absolute") {
      throw Error("BertConfig: " + path + ": position_embedding_type " +
                  j["position_embedding_type"].dump() + " is not supported (only \"absolute\")");
    }
    c.vocab_size = j.value("vocab_size", c.vocab_size);
    c.hidden_size = j.value("hidden_size", c.hidden_size);
    c.num_hidden_layers = j.value("num_hidden_layers", c.num_hidden_layers);
    c.num_attention_heads = j.value("num_attention_heads", c.num_attention_heads);
    c.intermediate_size = j.value("intermediate_size", c.intermediate_size);
    c.max_position_embeddings = j.value("max_position_embeddings", c.max_position_embeddings);
    c.type_vocab_size = j.value("type_vocab_size", c.type_vocab_size);
    c.pad_token_id = j.value("pad_token_id", c.pad_token_id);
    c.hidden_dropout_prob = j.value("hidden_dropout_prob", c.hidden_dropout_prob);
    c.attention_probs_dropout_prob =
        j.value("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
    c.layer_norm_eps = j.value("layer_norm_eps", c.layer_norm_eps);
    c.initializer_range = j.value("initializer_range", c.initializer_range);
  } catch (const json::exception& e) {
    throw Error("BertConfig: " + path + ": " + e.what());
  }
  c.validate();
  return c;
}

std::string BertConfig::to_json() const {
  return json{{"model_type", "bert"},
              {"name", name},
              {"vocab_size", vocab_size},
              {"hidden_size", hidden_size},
              {"num_hidden_layers", num_hidden_layers},
              {"num_attention_heads", num_attention_heads},
              {"intermediate_size", intermediate_size},
              {"max_position_embeddings", max_position_embeddings},
              {"type_vocab_size", type_vocab_size},
              {"pad_token_id", pad_token_id},
              {"hidden_dropout_prob", hidden_dropout_prob},
              {"attention_probs_dropout_prob", attention_probs_dropout_prob},
              {"layer_norm_eps", layer_norm_eps},
              {"initializer_range", initializer_range},
              {"hidden_act", "gelu"}}
      .dump();
}

void BertConfig::validate() const {
  auto positive = [](const char* field, int64_t v) {
    if (v <= 0)
      throw Error(std::string("BertConfig: ") + field + " must be positive, got " +
                  std::to_string(v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  if (hidden_size % num_attention_heads != 0) {
    throw Error("BertConfig: hidden_size " + std::to_string(hidden_size) +
                " is not a multiple of num_attention_heads " + std::to_string(num_attention_heads));
  }
  if (pad_token_id < 0 || pad_token_id >= vocab_size) {
    throw Error("BertConfig: pad_token_id " + std::to_string(pad_token_id) +
                " is outside the vocabulary of " + std::to_string(vocab_size));
  }
  for (auto [field, p] :
       {std::pair{"hidden_dropout_prob", hidden_dropout_prob},
        std::pair{"attention_probs_dropout_prob", attention_probs_dropout_prob}}) {
    if (!(p >= 0 && p < 1)) {
      throw Error(std::string("BertConfig: ") + field + " must be in [0, 1), got " +
                  std::to_string(p));
    }
  }
}

Bert::Bert(BertConfig config) : config_(std::move(config)), parts_(std::make_unique<Parts>()) {
  config_.validate();
  parts_->body = register_module("bert", std::make_shared<Body>(config_));
  parts_->head = register_module("cls", std::make_shared<MlmHead>(config_));
}

Bert::~Bert() = default;

Tensor Bert::encode(const Tensor& input_ids, const Tensor& attention_mask,
                    const Tensor& token_type_ids) const {
  if (!input_ids.defined() || input_ids.dim() != 2 || dtype_is_floating(input_ids.dtype())) {
    throw Error("Bert: input_ids must be integer ids of shape [batch, length], got " +
                (input_ids.defined() ? input_ids.shape().str() + " " + dtype_name(input_ids.dtype())
                                     : std::string("an undefined tensor")));
  }
  const int64_t B = input_ids.shape()[0], L = input_ids.shape()[1];
  if (L > config_.max_position_embeddings) {
    throw Error("Bert: sequences of " + std::to_string(L) + " tokens exceed the " +
                std::to_string(config_.max_position_embeddings) + " positions of the model");
  }
  for (const Tensor* t : {&attention_mask, &token_type_ids}) {
    if (t->defined() && t->shape() != input_ids.shape()) {
      throw Error(
          "Bert: " + std::string(t == &attention_mask ? "attention_mask" : "token_type_ids") +
          " has shape " + t->shape().str() + " but input_ids " + input_ids.shape().str());
    }
  }
  const Embeddings& e = *parts_->body->embeddings;
  // Positions 0..L-1 and token type 0 are the same for every sequence: rows broadcast over the
  // batch, and their gradients sum over it, as gathering them per token would.
  const Tensor positions = e.position->weight.slice(0, 0, L);
  const Tensor types = token_type_ids.defined() ? (*e.token_type)(token_type_ids)
                                                : e.token_type->weight.select(0, 0);
  Tensor x = (*e.drop)((*e.norm)((*e.word)(input_ids) + positions + types));
  Tensor additive_mask;
  if (attention_mask.defined()) {
    // BERT's -10000 for masked keys: exp underflows to zero either way in f32.
    additive_mask = ((1.0 - attention_mask.to(x.dtype())) * -10000.0).view({B, 1, 1, L});
  }
  for (const auto& layer : parts_->body->encoder->layers) x = layer->forward(x, additive_mask);
  return x;
}

Tensor Bert::mlm_logits(const Tensor& hidden) const {
  const MlmHead& h = *parts_->head;
  const Tensor t = (*h.norm)(gelu((*h.transform)(hidden)));
  return linear(t, parts_->body->embeddings->word->weight, h.bias);
}

Tensor Bert::mlm_loss(const Tensor& input_ids, const Tensor& labels,
                      const Tensor& attention_mask) const {
  if (!labels.defined() || labels.shape() != input_ids.shape()) {
    throw Error("Bert: labels must have the shape of input_ids " + input_ids.shape().str() +
                (labels.defined() ? ", got " + labels.shape().str() : std::string()));
  }
  const Tensor logits = forward(input_ids, attention_mask);
  return cross_entropy(logits.view({-1, config_.vocab_size}), labels.reshape({-1}), -100);
}

Tensor Bert::mlm_loss_at(const Tensor& input_ids, const Tensor& positions,
                         const Tensor& position_labels, const Tensor& attention_mask) const {
  if (!positions.defined() || positions.dim() != 1 || dtype_is_floating(positions.dtype()) ||
      positions.dtype() == DType::boolean) {
    throw Error("Bert::mlm_loss_at: positions must be a 1-D tensor of integer indices, got " +
                (positions.defined()
                     ? std::string(dtype_name(positions.dtype())) + " " + positions.shape().str()
                     : std::string("undefined")));
  }
  if (!position_labels.defined() || position_labels.shape() != positions.shape()) {
    throw Error(
        "Bert::mlm_loss_at: position_labels must have the shape of positions " +
        positions.shape().str() +
        (position_labels.defined() ? ", got " + position_labels.shape().str() : std::string()));
  }
  const Tensor hidden = encode(input_ids, attention_mask);
  const Tensor rows = hidden.reshape({-1, config_.hidden_size}).index_select(0, positions);
  return cross_entropy(mlm_logits(rows), position_labels, -100);
}

nn::LoadResult Bert::load_pretrained(const nn::NamedTensors& state) {
  // Names a BertForMaskedLM or BertModel file may hold that this model has no use for: the
  // pooler, the position_ids buffer, the tied decoder, the next-sentence head.
  auto unused = [](const std::string& n) {
    for (const char* prefix :
         {"pooler.", "bert.pooler.", "cls.seq_relationship.", "cls.predictions.decoder."}) {
      if (n.rfind(prefix, 0) == 0) return true;
    }
    return n == "embeddings.position_ids" || n == "bert.embeddings.position_ids";
  };
  nn::NamedTensors mapped;
  for (const auto& [name, tensor] : state) {
    if (unused(name)) continue;
    const bool prefixed = name.rfind("bert.", 0) == 0 || name.rfind("cls.", 0) == 0;
    mapped.emplace_back(prefixed ? name : "bert." + name, tensor);
  }
  nn::LoadResult result = load_state_dict(mapped, /*strict=*/false);
  if (result.missing.size() == named_parameters().size()) {
    throw Error("Bert: no tensor of the state names a parameter of the model (first name: '" +
                (state.empty() ? std::string("none") : state.front().first) + "')");
  }
  return result;
}

nn::LoadResult Bert::load_pretrained(const std::string& safetensors_path) {
  const safetensors::File file = safetensors::load(safetensors_path);
  nn::NamedTensors state;
  for (const auto& t : file.tensors) {
    if (t.name.rfind("optimizer.", 0) != 0) state.emplace_back(t.name, t.tensor);
  }
  return load_pretrained(state);
}

}  // namespace lt::models
