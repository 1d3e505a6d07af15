#pragma once
// BERT (Devlin et al. 2019) with its masked-language-model head, as HuggingFace's
// BertForMaskedLM: the same structure, parameter names and initialization, so its checkpoints
// load as they are (lazytensor/safetensors.h reads them).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/nn.h"

namespace lt::models {

// HuggingFace's BertConfig fields (hidden_act is GELU's erf form; absolute positions).
struct BertConfig {
  std::string name = "custom";
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  int64_t pad_token_id = 0;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;

  // "tiny" (2 layers, hidden 64, 4 heads, intermediate 256: for tests), "mini" (6, 384, 12,
  // 1536: all-MiniLM-L6-v2's shape), "base" (bert-base-uncased), "large" (bert-large-uncased);
  // all with BERT's uncased 30522-token vocabulary. lt::Error for other names.
  static BertConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
  // A HuggingFace config.json (fields absent from it keep the defaults above).
  static BertConfig from_json_file(const std::string& path);
  // The fields as a HuggingFace config.json would hold them.
  std::string to_json() const;
  void validate() const;  // lt::Error naming the field that is out of range
};

// BertForMaskedLM. Parameter names are HuggingFace's ("bert.embeddings.word_embeddings.weight",
// "bert.encoder.layer.0.attention.self.query.weight", ...,
// "cls.predictions.transform.dense.weight", "cls.predictions.bias"); the decoder's weight is the
// word embeddings (tied), not a parameter of its own. There is no pooler: the MLM head does not use
// it.
class Bert : public nn::Module {
 public:
  // HuggingFace's initialization: linear and embedding weights ~ N(0, initializer_range^2) from
  // the generator, biases zero, layer norms one and zero, the padding row zero.
  explicit Bert(BertConfig config);
  ~Bert() override;

  // The last hidden states [B, L, hidden] of ids [B, L]. attention_mask [B, L] holds 1 for
  // tokens to attend to and 0 for padding (all attend when undefined); token_type_ids [B, L]
  // default to zeros. Dropout is active in training mode.
  Tensor encode(const Tensor& input_ids, const Tensor& attention_mask = Tensor(),
                const Tensor& token_type_ids = Tensor()) const;
  // MLM logits [B, L, vocab] from hidden states.
  Tensor mlm_logits(const Tensor& hidden) const;
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = Tensor()) const {
    return mlm_logits(encode(input_ids, attention_mask));
  }
  // Mean cross-entropy of the MLM logits over positions whose label is not -100.
  Tensor mlm_loss(const Tensor& input_ids, const Tensor& labels,
                  const Tensor& attention_mask = Tensor()) const;
  // The same loss with the MLM head run only at the predicted tokens (as the original BERT and
  // NVIDIA's pretraining do; HuggingFace's runs it at every position): positions [K] are flat
  // indices b * L + l into input_ids, position_labels [K] their labels (-100 for rows to leave
  // out, such as padding). With the positions of every label that is not -100 it equals
  // mlm_loss(input_ids, labels), gradients included, in about K / (B * L) of the head's work.
  // data::mask_tokens on host ids gives both (MlmBatch::predicted_positions and _labels).
  Tensor mlm_loss_at(const Tensor& input_ids, const Tensor& positions,
                     const Tensor& position_labels, const Tensor& attention_mask = Tensor()) const;

  // Loads weights named as HuggingFace's BertForMaskedLM or BertModel (a BertModel file's names
  // lack the "bert." prefix; its pooler and position_ids buffer are not used). Shapes must
  // match (lt::Error naming the tensor, before anything is copied); the result lists what the
  // state did not cover, e.g. the MLM head for a sentence-embedding checkpoint such as
  // all-MiniLM-L6-v2, which keeps its initial values.
  nn::LoadResult load_pretrained(const nn::NamedTensors& state);
  // The same from a safetensors file (tensors named optimizer.* in a training checkpoint are
  // not parameters and are skipped).
  nn::LoadResult load_pretrained(const std::string& safetensors_path);

  const BertConfig& config() const { return config_; }

 private:
  struct Parts;
  BertConfig config_;
  std::unique_ptr<Parts> parts_;
};

}  // namespace lt::models
