// Modules (lt::nn), BERT (lt::models::Bert) against HuggingFace, masked-language-model data,
// and a tiny BERT trained on real text. The HuggingFace values are shipped in tests/data (made
// by bench/reference/minilm_reference.py); the MiniLM weights and vocabulary come from
// `make models`, the text from Debian's fortunes package.
#include "lazytensor/bert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "lazytensor/lazytensor.h"
#include "lazytensor/mlm.h"
#include "lazytensor/nn.h"
#include "lazytensor/safetensors.h"
#include "lazytensor/text.h"
#include "test_support.h"

namespace {

using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt_test::counter;
using lt_test::error_message;
using lt_test::expect_mentions;
using json = nlohmann::json;
namespace fs = std::filesystem;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

const fs::path kMiniLM = fs::path(LT_MODELS_DIR) / "all-MiniLM-L6-v2";
const char* const kCorpus = "/usr/share/games/fortunes";

const lt::safetensors::File& reference() {
  static const lt::safetensors::File file =
      lt::safetensors::load(std::string(LT_TEST_DATA_DIR) + "/minilm_reference.safetensors");
  return file;
}

void require_minilm() {
  ASSERT_TRUE(fs::exists(kMiniLM / "model.safetensors"))
      << kMiniLM << " is missing: run `make models` (it installs all-MiniLM-L6-v2 offline)";
}

std::vector<float> floats_of(const Tensor& t) {
  return t.to(DType::f32).to_vector<float>();
}

class BertTest : public lt_test::EngineTest {};

TEST_F(BertTest, ParameterNamesAndShapesAreHuggingFaceBertForMaskedLM) {
  const json want = json::parse(reference().metadata.at("tiny_mlm_parameters"));
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  const auto got = model.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i][0].get<std::string>());
    EXPECT_EQ(got[i].second.shape().to_vector(), want[i][1].get<std::vector<int64_t>>())
        << got[i].first;
    EXPECT_TRUE(got[i].second.requires_grad()) << got[i].first;
  }
}

TEST_F(BertTest, MiniLMHiddenStatesMatchTransformers) {
  require_minilm();
  lt::models::Bert model(
      lt::models::BertConfig::from_json_file((kMiniLM / "config.json").string()));
  const lt::nn::LoadResult loaded = model.load_pretrained((kMiniLM / "model.safetensors").string());
  // A sentence-embedding checkpoint has no MLM head: exactly those five stay initial.
  EXPECT_EQ(loaded.missing, (std::vector<std::string>{"cls.predictions.bias",
                                                      "cls.predictions.transform.dense.weight",
                                                      "cls.predictions.transform.dense.bias",
                                                      "cls.predictions.transform.LayerNorm.weight",
                                                      "cls.predictions.transform.LayerNorm.bias"}));
  EXPECT_TRUE(loaded.unexpected.empty());
  model.eval();
  const Tensor hidden = model.encode(reference().at("input_ids"), reference().at("attention_mask"));
  const std::vector<float> got = floats_of(hidden);
  const std::vector<float> want = floats_of(reference().at("hidden_states"));
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_LE(worst, 1e-4) << "largest difference from transformers' BertModel";
}

// Autocast's bf16 products against the f32 model on the pretrained MiniLM: six layers of bf16
// operands (8 significant bits) move the hidden states (values of magnitude ~1, some ~10) by
// a small fraction of their spread, and far less than they differ between sentences.
TEST_F(BertTest, MiniLMHiddenStatesUnderAutocastStayCloseToFp32) {
  require_minilm();
  lt::models::Bert model(
      lt::models::BertConfig::from_json_file((kMiniLM / "config.json").string()));
  model.load_pretrained((kMiniLM / "model.safetensors").string());
  model.eval();
  const Tensor ids = reference().at("input_ids"), mask = reference().at("attention_mask");
  const std::vector<float> fp32 = floats_of(model.encode(ids, mask));
  Tensor autocast_hidden;
  {
    const lt::AutocastGuard autocast(DType::bf16);
    autocast_hidden = model.encode(ids, mask);
  }
  EXPECT_EQ(autocast_hidden.dtype(), DType::f32);
  const std::vector<float> bf16 = floats_of(autocast_hidden);
  const std::vector<float> want = floats_of(reference().at("hidden_states"));
  ASSERT_EQ(bf16.size(), fp32.size());
  double worst = 0, squared_error = 0, squared_value = 0, squared_from_reference = 0;
  for (size_t i = 0; i < bf16.size(); ++i) {
    worst = std::max(worst, double(std::abs(bf16[i] - fp32[i])));
    squared_error += double(bf16[i] - fp32[i]) * (bf16[i] - fp32[i]);
    squared_value += double(fp32[i]) * fp32[i];
    squared_from_reference += double(bf16[i] - want[i]) * (bf16[i] - want[i]);
  }
  const double relative_rms = std::sqrt(squared_error / squared_value);
  std::printf(
      "MiniLM hidden states, autocast bf16 vs fp32: largest difference %.4f, RMS "
      "difference %.4f of the RMS value\n",
      worst, relative_rms);
  // Measured: 0.0056 of the RMS value, largest 0.012 (the bounds leave room for other GEMM
  // kernels' summation orders).
  EXPECT_LE(relative_rms, 0.02);
  EXPECT_LE(worst, 0.05);
  EXPECT_LE(std::sqrt(squared_from_reference / squared_value), 0.02)
      << "against transformers' f32 hidden states";
  // Not the f32 values: the products did run on rounded operands.
  EXPECT_GT(relative_rms, 1e-4);
}

TEST_F(BertTest, ATokenizerAndTheMiniLMVocabularyGiveTheReferenceIds) {
  require_minilm();
  const lt::text::WordPieceTokenizer tokenizer((kMiniLM / "vocab.txt").string());
  const auto sentences =
      json::parse(reference().metadata.at("sentences")).get<std::vector<std::string>>();
  const std::vector<int64_t> ids = reference().at("input_ids").to_vector<int64_t>();
  const int64_t length = reference().at("input_ids").shape()[1];
  for (size_t s = 0; s < sentences.size(); ++s) {
    std::vector<int64_t> want(ids.begin() + s * length, ids.begin() + (s + 1) * length);
    while (want.back() == tokenizer.pad_id()) want.pop_back();
    std::vector<int64_t> got{tokenizer.cls_id()};
    for (int64_t id : tokenizer.encode(sentences[s])) got.push_back(id);
    got.push_back(tokenizer.sep_id());
    EXPECT_EQ(got, want) << sentences[s];
  }
}

TEST_F(BertTest, LoadingAWrongShapeNamesTheTensorAndChangesNothing) {
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  const Tensor word = model.named_parameters()[0].second;
  const std::vector<float> before = floats_of(word);
  const std::string message = error_message([&] {
    model.load_pretrained({{"bert.embeddings.LayerNorm.weight", lt::ones({64})},
                           {"bert.embeddings.word_embeddings.weight", lt::zeros({30522, 32})}});
  });
  expect_mentions(message,
                  {"bert.embeddings.word_embeddings.weight", "[30522, 32]", "[30522, 64]"});
  EXPECT_EQ(floats_of(word), before);
  EXPECT_EQ(floats_of(model.named_parameters()[3].second), std::vector<float>(64, 1.0f));
  expect_mentions(error_message([&] {
                    model.load_pretrained({{"decoder.weight", lt::ones({2})}});
                  }),
                  {"no tensor", "decoder.weight"});
}

TEST_F(BertTest, StrictLoadNamesWhatIsMissingAndUnexpected) {
  lt::nn::Linear layer(3, 2);
  const std::string message = error_message([&] {
    layer.load_state_dict({{"weight", lt::zeros({2, 3})}, {"scale", lt::zeros({2})}});
  });
  expect_mentions(message, {"missing 'bias'", "unexpected 'scale'"});
  const lt::nn::LoadResult loose =
      layer.load_state_dict({{"weight", lt::ones({2, 3})}}, /*strict=*/false);
  EXPECT_EQ(loose.missing, std::vector<std::string>{"bias"});
  EXPECT_EQ(floats_of(layer.weight), std::vector<float>(6, 1.0f));
}

TEST_F(BertTest, ModulesInitializeLikeTorchAndReproduceFromTheSeed) {
  lt::manual_seed(7);
  lt::nn::Linear a(100, 50);
  lt::manual_seed(7);
  lt::nn::Linear b(100, 50);
  const std::vector<float> wa = floats_of(a.weight);
  EXPECT_EQ(wa, floats_of(b.weight));
  const double bound = 1.0 / std::sqrt(100.0);
  double sum_sq = 0;
  for (float w : wa) {
    EXPECT_LE(std::abs(w), bound);
    sum_sq += double(w) * w;
  }
  // U(-b, b) has variance b^2 / 3.
  EXPECT_NEAR(sum_sq / wa.size(), bound * bound / 3, bound * bound / 3 * 0.1);
  lt::nn::Embedding table(10, 4, /*padding_idx=*/-1);
  const std::vector<float> rows = floats_of(table.weight);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(rows[9 * 4 + j], 0.0f) << "the padding row starts at 0";
  EXPECT_EQ(*table.padding_idx, 9);
}

TEST_F(BertTest, ThePaddingRowGetsNoGradient) {
  lt::nn::Embedding table(5, 3, /*padding_idx=*/0);
  const Tensor ids = lt::from_vector(std::vector<int64_t>{0, 2, 0, 4, 2}, {5});
  const Tensor out = table(ids);
  (out * lt::randn({5, 3}, 11)).sum().backward();
  const std::vector<float> grad = floats_of(table.weight.grad());
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(grad[0 * 3 + j], 0.0f);
    EXPECT_EQ(grad[1 * 3 + j], 0.0f);  // unused
    EXPECT_NE(grad[2 * 3 + j], 0.0f);
  }
  // The values at padding positions are the (zero) padding row, as in PyTorch.
  const std::vector<float> rows = floats_of(out);
  EXPECT_EQ(rows[0], 0.0f);
}

TEST_F(BertTest, EvalModeTurnsDropoutOffAndTrainModeOn) {
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  const Tensor ids = lt::from_vector(std::vector<int64_t>{101, 7592, 2088, 102}, {1, 4});
  model.eval();
  EXPECT_FALSE(model.is_training());
  EXPECT_EQ(floats_of(model.encode(ids)), floats_of(model.encode(ids)));
  model.train();
  EXPECT_NE(floats_of(model.encode(ids)), floats_of(model.encode(ids)));
}

TEST_F(BertTest, BadInputNamesTheProblem) {
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  expect_mentions(error_message([&] { model.encode(lt::zeros({2, 4})); }), {"input_ids", "f32"});
  expect_mentions(error_message([&] {
                    model.encode(lt::zeros({1, 513}, DType::i64));
                  }),
                  {"513", "512"});
  expect_mentions(error_message([&] {
                    model.encode(lt::zeros({2, 4}, DType::i64), lt::ones({2, 5}, DType::i64));
                  }),
                  {"attention_mask", "[2, 5]"});
  expect_mentions(error_message([] { lt::models::BertConfig::preset("huge"); }),
                  {"huge", "tiny", "large"});
  lt::models::BertConfig bad = lt::models::BertConfig::preset("tiny");
  bad.num_attention_heads = 5;
  expect_mentions(error_message([&] { lt::models::Bert{bad}; }), {"hidden_size 64", "5"});
}

// Ids [B, L] shaped as training sees them: [CLS] ... [SEP], some padding.
Tensor sample_ids(int64_t B, int64_t L, std::vector<int64_t>& host) {
  std::mt19937_64 rng(std::random_device{}());
  host.assign(B * L, 0);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t length = L - static_cast<int64_t>(rng() % 8);
    for (int64_t i = 0; i < length; ++i)
      host[b * L + i] = 1000 + static_cast<int64_t>(rng() % 29000);
    host[b * L] = 101;
    host[b * L + length - 1] = 102;
  }
  return lt::from_vector(host, {B, L});
}

// Checks BERT's masking of `ids` (64 x 128 of sample_ids): special tokens never predicted,
// labels the original ids, unpredicted tokens shown as they are, random ids in the vocabulary,
// and the proportions. Returns the predicted tokens' indices, in order.
std::vector<int64_t> check_bert_masking(const std::vector<int64_t>& ids,
                                        const lt::data::MlmBatch& batch,
                                        const lt::data::MlmOptions& options) {
  const std::vector<int64_t> shown = batch.input_ids.to_vector<int64_t>();
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  std::vector<int64_t> predicted;
  int64_t ordinary = 0, masked = 0, kept = 0, randomized = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const bool special = ids[i] == 0 || ids[i] == 101 || ids[i] == 102;
    ordinary += !special;
    if (labels[i] == -100) {
      EXPECT_EQ(shown[i], ids[i]) << i;
      continue;
    }
    EXPECT_FALSE(special) << "special token predicted at " << i;
    EXPECT_EQ(labels[i], ids[i]) << i;
    predicted.push_back(static_cast<int64_t>(i));
    if (shown[i] == 103) {
      ++masked;
    } else if (shown[i] == ids[i]) {
      ++kept;
    } else {
      ++randomized;
      EXPECT_GE(shown[i], 0);
      EXPECT_LT(shown[i], options.vocab_size);
    }
  }
  // About 7,700 ordinary tokens: 5 standard deviations of each proportion.
  const double count = static_cast<double>(predicted.size());
  EXPECT_NEAR(count / ordinary, 0.15, 0.02);
  EXPECT_NEAR(masked / count, 0.8, 0.06);
  EXPECT_NEAR(randomized / count, 0.1, 0.05);
  EXPECT_NEAR(kept / count, 0.1, 0.05);
  return predicted;
}

TEST_F(BertTest, MaskingFollowsBertsProportionsAndSparesSpecialTokens) {
  std::vector<int64_t> ids;
  const Tensor input = sample_ids(64, 128, ids);
  const lt::data::MlmOptions options;
  check_bert_masking(ids, lt::data::mask_tokens(input, options), options);
}

TEST_F(BertTest, MasksRepeatFromTheGeneratorStateAndChangeEveryStepWithoutRecompiling) {
  std::vector<int64_t> ids;
  const Tensor input = sample_ids(4, 64, ids);
  const lt::GeneratorState start = lt::generator_state();
  std::vector<std::vector<int64_t>> masks;
  for (int step = 0; step < 4; ++step) {
    masks.push_back(lt::data::mask_tokens(input, {}).labels.to_vector<int64_t>());
    if (step == 1) lt_test::settle();
  }
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_NE(masks[2], masks[3]);
  EXPECT_EQ(counter("UncachedCompile"), 0) << "a new mask was a new graph";
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  lt::set_generator_state(start);
  EXPECT_EQ(lt::data::mask_tokens(input, {}).labels.to_vector<int64_t>(), masks[0]);
}

// The host's masking: BERT's proportions, the predicted tokens listed in order and padded to
// predicted_capacity(), the same masks from the same key, and rows masked with first_row as
// the same rows of a whole batch.
TEST_F(BertTest, HostMaskingListsThePredictedTokensWithBertsProportions) {
  std::vector<int64_t> ids;
  sample_ids(64, 128, ids);
  const lt::data::MlmOptions options;
  const lt::data::MlmBatch batch = lt::data::mask_tokens(ids, 64, 128, options, 7);
  const std::vector<int64_t> predicted = check_bert_masking(ids, batch, options);
  const std::vector<int64_t> shown = batch.input_ids.to_vector<int64_t>();
  const std::vector<int64_t> labels = batch.labels.to_vector<int64_t>();
  const std::vector<int64_t> positions = batch.predicted_positions.to_vector<int64_t>();
  const std::vector<int64_t> position_labels = batch.predicted_labels.to_vector<int64_t>();
  ASSERT_EQ(positions.size(), size_t(lt::data::predicted_capacity(64 * 128, 0.15)));
  ASSERT_EQ(position_labels.size(), positions.size());
  ASSERT_LE(predicted.size(), positions.size());
  for (size_t k = 0; k < positions.size(); ++k) {
    if (k < predicted.size()) {
      EXPECT_EQ(positions[k], predicted[k]) << "the predicted tokens in order";
      EXPECT_EQ(position_labels[k], ids[predicted[k]]) << k;
    } else {
      EXPECT_EQ(positions[k], 0) << k;
      EXPECT_EQ(position_labels[k], -100) << "padding row " << k << " counts in the loss";
    }
  }

  EXPECT_EQ(lt::data::mask_tokens(ids, 64, 128, options, 7).labels.to_vector<int64_t>(), labels);
  EXPECT_NE(lt::data::mask_tokens(ids, 64, 128, options, 8).labels.to_vector<int64_t>(), labels);
  // Rows 40..63 masked on their own, as a rank of data parallelism does.
  const std::vector<int64_t> tail(ids.begin() + 40 * 128, ids.end());
  const lt::data::MlmBatch part = lt::data::mask_tokens(tail, 24, 128, options, 7, 40);
  EXPECT_EQ(part.labels.to_vector<int64_t>(),
            std::vector<int64_t>(labels.begin() + 40 * 128, labels.end()));
  EXPECT_EQ(part.input_ids.to_vector<int64_t>(),
            std::vector<int64_t>(shown.begin() + 40 * 128, shown.end()));
  // Its positions index its own rows: the whole batch's from row 40 on, less 40 rows.
  std::vector<int64_t> expected_positions;
  for (int64_t p : predicted) {
    if (p >= 40 * 128) expected_positions.push_back(p - 40 * 128);
  }
  std::vector<int64_t> part_positions = part.predicted_positions.to_vector<int64_t>();
  ASSERT_GE(part_positions.size(), expected_positions.size());
  part_positions.resize(expected_positions.size());
  EXPECT_EQ(part_positions, expected_positions);

  expect_mentions(error_message([&] { lt::data::mask_tokens(ids, 64, 100, options, 7); }),
                  {"mask_tokens", "8192 ids", "[64, 100]"});
  expect_mentions(error_message([&] { lt::data::mask_tokens(ids, 64, 128, options, 7, -1); }),
                  {"mask_tokens", "first_row", "-1"});
  lt::data::MlmOptions bad;
  bad.mask_prob = 1.5;
  expect_mentions(error_message([&] { lt::data::mask_tokens(ids, 64, 128, bad, 7); }),
                  {"mask_tokens", "probabilities"});
}

// predicted_capacity: the mean plus six standard deviations, in multiples of 32, at most all.
TEST_F(BertTest, PredictedCapacityCoversNearlyEveryBatch) {
  EXPECT_EQ(lt::data::predicted_capacity(1024, 0.15), 224);  // 153.6 + 6 x 11.4
  EXPECT_EQ(lt::data::predicted_capacity(64, 0.15), 32);     // 9.6 + 6 x 2.9
  EXPECT_EQ(lt::data::predicted_capacity(20, 0.15), 20);
  EXPECT_EQ(lt::data::predicted_capacity(1024, 1.0), 1024);
  EXPECT_EQ(lt::data::predicted_capacity(1024, 0.0), 32);
  // Every token predicted: the batch lists them all.
  std::vector<int64_t> ids;
  sample_ids(2, 16, ids);
  lt::data::MlmOptions all;
  all.mask_prob = 1;
  all.special_ids = {};
  const lt::data::MlmBatch batch = lt::data::mask_tokens(ids, 2, 16, all, 3);
  std::vector<int64_t> every(32);
  for (int64_t i = 0; i < 32; ++i) every[i] = i;
  EXPECT_EQ(batch.predicted_positions.to_vector<int64_t>(), every);
  EXPECT_EQ(batch.predicted_labels.to_vector<int64_t>(), ids);
}

// The head at the predicted tokens only gives mlm_loss's loss and gradients (dropout on: the
// same generator state draws the same masks in both).
TEST_F(BertTest, LossAtThePredictedTokensEqualsTheLossOverAllPositions) {
  lt::manual_seed(11);
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  std::vector<int64_t> ids;
  sample_ids(3, 24, ids);
  const lt::data::MlmBatch batch = lt::data::mask_tokens(ids, 3, 24, {}, 5);
  const std::vector<Tensor> params = model.parameters();
  const lt::GeneratorState start = lt::generator_state();
  const Tensor everywhere = model.mlm_loss(batch.input_ids, batch.labels);
  const std::vector<Tensor> expected = lt::grad({everywhere}, params);
  lt::set_generator_state(start);
  const Tensor at =
      model.mlm_loss_at(batch.input_ids, batch.predicted_positions, batch.predicted_labels);
  const std::vector<Tensor> got = lt::grad({at}, params);
  const double loss = everywhere.item();
  EXPECT_GT(loss, 9.0);
  EXPECT_NEAR(at.item(), loss, 1e-5 * loss);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k) {
    const std::vector<float> g = got[k].to_vector<float>(), e = expected[k].to_vector<float>();
    double scale = 0, worst = 0;
    for (size_t i = 0; i < e.size(); ++i) {
      scale = std::max(scale, std::abs(double(e[i])));
      worst = std::max(worst, std::abs(double(g[i]) - e[i]));
    }
    EXPECT_GT(scale, 0) << "parameter " << k << " got no gradient";
    // Plus an absolute 1e-8: the keys' biases have a gradient of zero (softmax ignores a
    // constant added to every score) that both compute as rounding noise.
    EXPECT_LE(worst, 1e-4 * scale + 1e-8) << "parameter " << k;
  }

  expect_mentions(error_message([&] {
                    model.mlm_loss_at(batch.input_ids, batch.labels, batch.predicted_labels);
                  }),
                  {"positions", "1-D", "[3, 24]"});
  expect_mentions(error_message([&] {
                    model.mlm_loss_at(batch.input_ids, batch.predicted_positions, batch.labels);
                  }),
                  {"position_labels", "[3, 24]"});
  const Tensor beyond = lt::from_vector(std::vector<int64_t>{0, 72}, Shape{2});
  const Tensor two = lt::from_vector(std::vector<int64_t>{5, 6}, Shape{2});
  expect_mentions(error_message([&] { model.mlm_loss_at(batch.input_ids, beyond, two).item(); }),
                  {"index_select", "72"});
}

TEST_F(BertTest, WindowsAreShuffledPerEpochFromTheSeedAlone) {
  std::vector<int64_t> stream(1000);
  for (size_t i = 0; i < stream.size(); ++i) stream[i] = 1000 + static_cast<int64_t>(i);
  const lt::data::TokenWindows windows(stream, 12, 101, 102, 5);  // 100 windows of 10 tokens
  ASSERT_EQ(windows.size(), 100);
  std::multiset<int64_t> firsts;
  for (int64_t b = 0; b < 25; ++b) {  // one epoch in batches of 4
    const std::vector<int64_t> ids = windows.shuffled_batch(b, 4).to_vector<int64_t>();
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(ids[k * 12], 101);
      EXPECT_EQ(ids[k * 12 + 11], 102);
      firsts.insert(ids[k * 12 + 1]);
    }
  }
  EXPECT_EQ(std::set<int64_t>(firsts.begin(), firsts.end()).size(), 100u) << "each window once";
  const lt::data::TokenWindows again(stream, 12, 101, 102, 5);
  EXPECT_EQ(again.shuffled_batch(31, 4).to_vector<int64_t>(),
            windows.shuffled_batch(31, 4).to_vector<int64_t>());
  EXPECT_NE(windows.shuffled_batch(0, 4).to_vector<int64_t>(),
            windows.shuffled_batch(25, 4).to_vector<int64_t>())
      << "the second epoch has an order of its own";
  expect_mentions(error_message([] {
                    lt::data::TokenWindows({1, 2}, 12, 101, 102, 0).shuffled_batch(0, 1);
                  }),
                  {"2 tokens", "12"});
}

// Documents as rows: [CLS] document [SEP], cut at max_len, padded to the batch's longest row
// or to max_len, with an attention mask over the real tokens; orders reshuffle per epoch.
TEST_F(BertTest, DocumentBatchesPadToTheLongestRowOrToTheMaximum) {
  std::vector<std::vector<int64_t>> docs;
  for (int64_t d = 0; d < 10; ++d) docs.push_back(std::vector<int64_t>(1 + d, 1000 + d));
  docs.emplace_back();  // an empty document is no row
  const lt::data::DocumentBatches rows(docs, 8, 101, 102, 0, 3);
  ASSERT_EQ(rows.size(), 10);
  const auto first = rows.ordered(0, 3, /*to_longest=*/true);  // documents of 1, 2, 3 tokens
  EXPECT_EQ(first.length, 5);
  EXPECT_EQ(first.tokens, 3 + 4 + 5);
  EXPECT_EQ(first.ids, (std::vector<int64_t>{101, 1000, 102, 0, 0,     //
                                             101, 1001, 1001, 102, 0,  //
                                             101, 1002, 1002, 1002, 102}));
  EXPECT_EQ(first.attention, (std::vector<int64_t>{1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}));
  const auto last = rows.ordered(8, 2, /*to_longest=*/true);  // 9 and 10 tokens, cut at 6
  EXPECT_EQ(last.length, 8);
  EXPECT_EQ(last.tokens, 16);
  EXPECT_EQ(last.ids[7], 102);
  EXPECT_EQ(rows.ordered(0, 3, /*to_longest=*/false).length, 8);

  std::multiset<int64_t> seen;
  for (int64_t b = 0; b < 5; ++b) {  // one epoch in batches of 2
    const auto batch = rows.shuffled(b, 2, true);
    for (int64_t r = 0; r < 2; ++r) seen.insert(batch.ids[r * batch.length + 1]);
  }
  EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u) << "each document once";
  const lt::data::DocumentBatches again(docs, 8, 101, 102, 0, 3);
  EXPECT_EQ(again.shuffled(7, 2, true).ids, rows.shuffled(7, 2, true).ids);
  expect_mentions(error_message([&] { rows.ordered(9, 2, true); }), {"documents 9 to 11 of 10"});
}

// The tiny model on the fortunes corpus with a warm-up + linear schedule, gradient clipping and
// dropout: the held-out loss falls, and after the first step no step compiles or waits for an
// upload.
TEST_F(BertTest, TinyBertTrainsOnRealTextWithOneCompileAndNoSyncTransfers) {
  require_minilm();
  ASSERT_TRUE(fs::exists(kCorpus)) << "install the Debian package fortunes";
  const lt::text::WordPieceTokenizer tokenizer((kMiniLM / "vocab.txt").string());
  std::vector<int64_t> train, heldout;
  const auto docs = lt::text::read_corpus(kCorpus);
  for (size_t i = 0; i < docs.size(); ++i) {
    auto& stream = i % 20 == 19 ? heldout : train;
    for (int64_t id : tokenizer.encode(docs[i].text)) stream.push_back(id);
    stream.push_back(tokenizer.sep_id());
  }
  constexpr int64_t B = 8, L = 32, kSteps = 40;
  const lt::data::TokenWindows train_windows(train, L, tokenizer.cls_id(), tokenizer.sep_id(), 1);
  const lt::data::TokenWindows heldout_windows(heldout, L, tokenizer.cls_id(), tokenizer.sep_id(),
                                               1);
  lt::manual_seed(1);
  lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
  lt::optim::AdamWOptions options;
  options.lr = 2e-3;
  options.weight_decay = 0.01;
  lt::optim::AdamW optimizer(model.parameters(), options);
  const auto schedule = lt::optim::make_schedule("linear", 4, kSteps);
  lt::data::MlmOptions mlm;

  auto heldout_loss = [&] {
    const lt::NoGradGuard no_grad;
    const lt::GeneratorState saved = lt::generator_state();
    lt::set_generator_state({99, 0});
    model.eval();
    double sum = 0;
    for (int64_t k = 0; k < 4; ++k) {
      const auto batch = lt::data::mask_tokens(heldout_windows.ordered_batch(k * B, B), mlm);
      sum += model.mlm_loss(batch.input_ids, batch.labels).item();
    }
    model.train();
    lt::set_generator_state(saved);
    return sum / 4;
  };
  const double before = heldout_loss();
  lt_test::settle();
  int64_t compiles_after_first = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const auto batch = lt::data::mask_tokens(train_windows.shuffled_batch(step, B), mlm);
    model.mlm_loss(batch.input_ids, batch.labels).backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
    lt::clip_grad_norm_(grads, 1.0);
    optimizer.set_lr(schedule->lr(options.lr, step));
    optimizer.step();
    lt::mark_step();
    if (step == 0) compiles_after_first = -counter("UncachedCompile");
  }
  lt::wait_device_ops();
  compiles_after_first += counter("UncachedCompile");
  EXPECT_EQ(compiles_after_first, 0);
  EXPECT_EQ(counter("TransferToDeviceSync"), 0);
  const double after = heldout_loss();
  EXPECT_LT(after, before - 0.5) << "held-out MLM loss " << before << " -> " << after;
}

// A tiny BERT trained on real text under autocast (bf16 products) and in f32, from the same
// initial weights, batches, masks and dropout: the bf16 loss curve tracks the f32 one (within
// 0.2% of the loss at every step; measured: 0.007% over 30 steps) while both fall.
TEST_F(BertTest, TinyBertUnderAutocastTracksTheFp32LossCurve) {
  require_minilm();
  ASSERT_TRUE(fs::exists(kCorpus)) << "install the Debian package fortunes";
  const lt::text::WordPieceTokenizer tokenizer((kMiniLM / "vocab.txt").string());
  std::vector<int64_t> tokens;
  for (const auto& doc : lt::text::read_corpus(kCorpus)) {
    for (int64_t id : tokenizer.encode(doc.text)) tokens.push_back(id);
    tokens.push_back(tokenizer.sep_id());
  }
  constexpr int64_t B = 8, L = 32, kSteps = 20;
  const lt::data::TokenWindows windows(tokens, L, tokenizer.cls_id(), tokenizer.sep_id(), 3);
  const auto train = [&](DType products) {
    lt::manual_seed(3);
    lt::models::Bert model(lt::models::BertConfig::preset("tiny"));
    lt::optim::AdamWOptions options;
    options.lr = 2e-3;
    options.weight_decay = 0.01;
    lt::optim::AdamW optimizer(model.parameters(), options);
    std::vector<Tensor> losses;
    for (int64_t step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      const auto batch = lt::data::mask_tokens(windows.shuffled_batch(step, B), {});
      Tensor loss;
      {
        const lt::AutocastGuard autocast(products);
        loss = model.mlm_loss(batch.input_ids, batch.labels);
      }
      loss.backward();
      optimizer.step();
      losses.push_back(loss);
      lt::mark_step();
    }
    std::vector<double> values;
    for (const Tensor& loss : losses) values.push_back(loss.item());
    return values;
  };
  const std::vector<double> fp32 = train(DType::f32);
  const std::vector<double> bf16 = train(DType::bf16);
  double worst = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    worst = std::max(worst, std::abs(bf16[step] - fp32[step]) / fp32[step]);
  }
  std::printf(
      "tiny BERT, %lld steps: loss %.4f -> %.4f (fp32), %.4f -> %.4f (autocast bf16); "
      "largest relative difference %.5f\n",
      static_cast<long long>(kSteps), fp32.front(), fp32.back(), bf16.front(), bf16.back(), worst);
  EXPECT_LE(worst, 0.002);
  EXPECT_GT(worst, 0) << "autocast changed no loss: were the products in bf16?";
  EXPECT_LT(fp32.back(), fp32.front() - 1.0) << "the f32 run did not learn";
  EXPECT_LT(bf16.back(), bf16.front() - 1.0) << "the bf16 run did not learn";
}

}  // namespace
