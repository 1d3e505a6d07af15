// Sizes as kernel arguments: a model trained on batches of varying length and a greedy decoder
// over a growing context compile a few graphs, not one per length, and compute what a graph
// compiled for each length computes (lt::set_symbolic_sizes(false) gives those).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "lazytensor/bert.h"
#include "lazytensor/lazytensor.h"
#include "lazytensor/optim.h"
#include "test_support.h"

namespace {

using lt::Tensor;
using lt_test::counter;

[[maybe_unused]] testing::Environment* const kInterpreter = lt_test::use_interpreter();

class DynamicSizesTest : public lt_test::EngineTest {
 protected:
  void TearDown() override { lt::set_symbolic_sizes(true); }
};

// A small BERT (a 512-word vocabulary keeps the MLM head cheap) without dropout.
lt::models::BertConfig small_bert() {
  lt::models::BertConfig config = lt::models::BertConfig::preset("tiny");
  config.vocab_size = 512;
  config.hidden_dropout_prob = 0;
  config.attention_probs_dropout_prob = 0;
  return config;
}

// One batch padded to its longest sequence, as dynamic padding makes it: row b holds
// length - 3 * b real tokens, then padding (id 0, attention 0, label -100); a seventh of the
// real tokens are predicted.
struct PaddedBatch {
  Tensor ids, mask, labels;
};
PaddedBatch padded_batch(int64_t batch, int64_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> ids(batch * length), mask(batch * length), labels(batch * length, -100);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t real = std::max<int64_t>(2, length - 3 * b);
    for (int64_t l = 0; l < length; ++l) {
      const int64_t i = b * length + l;
      if (l >= real) continue;
      ids[i] = 1 + static_cast<int64_t>(rng() % 511);
      mask[i] = 1;
      if (rng() % 7 == 0) labels[i] = ids[i];
    }
    labels[b * length] = ids[b * length];  // every row predicts one token at least
  }
  return {lt::from_vector(ids, {batch, length}), lt::from_vector(mask, {batch, length}),
          lt::from_vector(labels, {batch, length})};
}

// The losses of 30 AdamW steps over batches whose length goes through 9 values in 16..128.
std::vector<double> train_on_varying_lengths() {
  const std::vector<int64_t> lengths{16, 128, 40, 64, 24, 96, 33, 112, 80};
  lt::manual_seed(5);
  lt::models::Bert model(small_bert());
  lt::optim::AdamWOptions options;
  options.lr = 1e-3;
  options.weight_decay = 0.01;
  lt::optim::AdamW optimizer(model.parameters(), options);
  std::vector<Tensor> losses;
  for (int step = 0; step < 30; ++step) {
    const PaddedBatch batch =
        padded_batch(4, lengths[step % lengths.size()], static_cast<uint32_t>(step));
    optimizer.zero_grad();
    const Tensor loss = model.mlm_loss(batch.ids, batch.labels, batch.mask);
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
    lt::clip_grad_norm_(grads, 1.0);
    optimizer.step();
    losses.push_back(loss.detach());
    lt::mark_step();
  }
  std::vector<double> out;
  for (const Tensor& loss : losses) out.push_back(loss.item());
  return out;
}

TEST_F(DynamicSizesTest, TrainingOnNineLengthsCompilesAtMostThreeGraphs) {
  lt_test::settle();
  const std::vector<double> losses = train_on_varying_lengths();
  const int64_t compiles = counter("UncachedCompile");
  EXPECT_LE(compiles, 3) << lt::last_recompile_reason();
  // A new length plans nothing: every plan made is a compile, and the lengths are binds.
  EXPECT_EQ(lt::metrics::timer_stats("CompileTime").count, compiles);
  EXPECT_GE(counter("SizeBind"), 8);
  // The compiles are the first steps' (parameters, then the optimizer's state, become inputs).
  const std::vector<int64_t> per_step = lt::compiles_per_step();
  ASSERT_GE(per_step.size(), 30u);
  EXPECT_EQ(std::accumulate(per_step.end() - 27, per_step.end(), int64_t{0}), 0)
      << lt::last_recompile_reason();

  lt::set_symbolic_sizes(false);
  lt::clear_compile_caches();
  lt_test::settle();
  const std::vector<double> per_length = train_on_varying_lengths();
  EXPECT_GE(counter("UncachedCompile"), 9) << "a graph per length";
  EXPECT_EQ(counter("SizeBind"), 0);
  ASSERT_EQ(losses.size(), per_length.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    EXPECT_NEAR(losses[s], per_length[s], 1e-6 * std::abs(per_length[s])) << "step " << s;
  }
  EXPECT_LT(losses.back(), losses.front()) << "the model learns";
}

// Greedy decoding as a GPT script writes it: run the model on the context (cropped to its last
// `crop` tokens, as nanoGPT's idx[:, -block_size:], when crop > 0), take the last position's
// argmax, append it, read it. `cut_each_token` calls mark_step() after the append.
std::vector<int64_t> greedy_decode(const lt::models::Bert& model, int tokens, bool cut_each_token,
                                   int64_t crop = 0) {
  Tensor context = lt::from_vector(std::vector<int64_t>{5, 17, 99, 3, 250, 42, 7, 8}, {1, 8});
  std::vector<int64_t> out;
  for (int t = 0; t < tokens; ++t) {
    const Tensor window = crop > 0 ? context.slice(1, -crop, context.shape()[1]) : context;
    const Tensor logits = model.forward(window);  // [1, T, vocab]
    const Tensor next = logits.select(1, -1).argmax(-1, /*keepdim=*/true);
    context = lt::cat({context, next}, 1);
    if (cut_each_token) lt::mark_step();
    out.push_back(static_cast<int64_t>(next.item()));
  }
  return out;
}

TEST_F(DynamicSizesTest, GreedyDecodingOfAHundredTokensCompilesAtMostThreeGraphs) {
  lt::manual_seed(9);
  lt::models::Bert model(small_bert());
  model.eval();
  const lt::NoGradGuard no_grad;
  for (const bool cut_each_token : {false, true}) {
    SCOPED_TRACE(cut_each_token ? "mark_step() per token" : "reads only");
    lt::set_symbolic_sizes(true);
    lt::clear_compile_caches();
    lt_test::settle();
    const std::vector<int64_t> tokens = greedy_decode(model, 100, cut_each_token);
    EXPECT_LE(counter("UncachedCompile"), 3) << lt::last_recompile_reason();
    // A read keeps the context it appended to: no token's graph runs an earlier forward.
    EXPECT_LT(lt::last_step_stats().graph_nodes, 400);

    lt::set_symbolic_sizes(false);
    lt::clear_compile_caches();
    lt_test::settle();
    EXPECT_EQ(greedy_decode(model, 100, cut_each_token), tokens)
        << "the tokens of a graph compiled for each length";
    EXPECT_GE(counter("UncachedCompile"), 100);
  }
}

// Once the context is longer than the model's window, nanoGPT crops it to its last block_size
// tokens: a view whose offset grows by one a token, which is a size like any other.
TEST_F(DynamicSizesTest, ACroppedContextBindsItsGrowingOffset) {
  lt::manual_seed(9);
  lt::models::Bert model(small_bert());
  model.eval();
  const lt::NoGradGuard no_grad;
  lt_test::settle();
  const std::vector<int64_t> tokens = greedy_decode(model, 60, false, /*crop=*/24);
  EXPECT_LE(counter("UncachedCompile"), 3) << lt::last_recompile_reason();
  lt::set_symbolic_sizes(false);
  lt::clear_compile_caches();
  lt_test::settle();
  EXPECT_EQ(greedy_decode(model, 60, false, /*crop=*/24), tokens);
}

// What a read computes stays computed: the values its graph computes on the way, and one op on
// them (the context with the new token appended), become data.
TEST_F(DynamicSizesTest, AReadKeepsWhatItComputed) {
  const Tensor x = lt::from_vector(std::vector<float>{1, 2, 3, 4}, {4});
  Tensor accumulated = lt::zeros({1});
  lt_test::settle();
  const Tensor doubled = x * 2.0;
  const Tensor total = doubled.sum();
  const Tensor appended = lt::cat({doubled, total.reshape({1})});
  const Tensor unrelated = lt::ones({3}) * 5.0;
  const Tensor of_the_input = x.reshape({2, 2}).transpose(0, 1) * 0.5;  // a view of data
  accumulated.add_(total);  // an in-place update: committed by its step, not by a read
  EXPECT_DOUBLE_EQ(total.item(), 20.0);
  EXPECT_FALSE(doubled.is_pending());
  EXPECT_FALSE(appended.is_pending());
  EXPECT_TRUE(unrelated.is_pending()) << "not computed by the read's graph";
  EXPECT_TRUE(of_the_input.is_pending()) << "an op on a view of data: nothing of the graph";
  EXPECT_TRUE(accumulated.is_pending());
  EXPECT_EQ(appended.to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 20}));
  EXPECT_EQ(accumulated.to_vector<float>(), (std::vector<float>{20}));
}

}  // namespace
