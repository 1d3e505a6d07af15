// Generation over a growing context, as a GPT script writes it: a small causal transformer made
// of lt::nn modules learns to count (mod 16) on batches of varying length, then continues a
// prompt greedily and by top-k sampling, one token at a time. Every token runs the model on the
// whole context, a length it has not seen: sizes are kernel arguments, so the lengths share one
// compiled graph.
//
//   generate [tokens]      (default 40, at most 96)
#include <lazytensor/lazytensor.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <vector>

namespace {

using lt::Tensor;

constexpr int64_t kVocab = 16, kWidth = 32, kLayers = 2, kContext = 128;

// Pre-norm attention and MLP, one head.
class Block : public lt::nn::Module {
 public:
  Block() {
    ln1_ =
        register_module("ln1", std::make_shared<lt::nn::LayerNorm>(std::vector<int64_t>{kWidth}));
    qkv_ = register_module("qkv", std::make_shared<lt::nn::Linear>(kWidth, 3 * kWidth));
    proj_ = register_module("proj", std::make_shared<lt::nn::Linear>(kWidth, kWidth));
    ln2_ =
        register_module("ln2", std::make_shared<lt::nn::LayerNorm>(std::vector<int64_t>{kWidth}));
    up_ = register_module("up", std::make_shared<lt::nn::Linear>(kWidth, 4 * kWidth));
    down_ = register_module("down", std::make_shared<lt::nn::Linear>(4 * kWidth, kWidth));
  }
  // x [B, T, width]; future [T, T] is true where a position would see a later one.
  Tensor forward(const Tensor& x, const Tensor& future) const {
    const Tensor qkv = (*qkv_)((*ln1_)(x));
    const Tensor q = qkv.slice(2, 0, kWidth), k = qkv.slice(2, kWidth, 2 * kWidth),
                 v = qkv.slice(2, 2 * kWidth, 3 * kWidth);
    const Tensor scores = lt::matmul(q, k.transpose(1, 2)) * (1.0 / std::sqrt(double(kWidth)));
    const Tensor attention =
        scores.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
    const Tensor h = x + (*proj_)(lt::matmul(attention, v));
    return h + (*down_)(lt::gelu((*up_)((*ln2_)(h))));
  }

 private:
  std::shared_ptr<lt::nn::LayerNorm> ln1_, ln2_;
  std::shared_ptr<lt::nn::Linear> qkv_, proj_, up_, down_;
};

class Gpt : public lt::nn::Module {
 public:
  Gpt() {
    tokens_ = register_module("tokens", std::make_shared<lt::nn::Embedding>(kVocab, kWidth));
    positions_ =
        register_module("positions", std::make_shared<lt::nn::Embedding>(kContext, kWidth));
    for (int64_t l = 0; l < kLayers; ++l) {
      blocks_.push_back(register_module("block" + std::to_string(l), std::make_shared<Block>()));
    }
    ln_ = register_module("ln", std::make_shared<lt::nn::LayerNorm>(std::vector<int64_t>{kWidth}));
    head_ = register_module("head", std::make_shared<lt::nn::Linear>(kWidth, kVocab));
  }
  // ids [B, T] -> logits [B, T, vocab]. T is whatever the context holds now.
  Tensor forward(const Tensor& ids) const {
    const int64_t t = ids.shape()[1];
    const Tensor position = lt::arange(double(t));
    const Tensor future = position.reshape({t, 1}).lt(position.reshape({1, t}));
    Tensor x = (*tokens_)(ids) + (*positions_)(position);
    for (const auto& block : blocks_) x = block->forward(x, future);
    return (*head_)((*ln_)(x));
  }

 private:
  std::shared_ptr<lt::nn::Embedding> tokens_, positions_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<lt::nn::LayerNorm> ln_;
  std::shared_ptr<lt::nn::Linear> head_;
};

// Batches of counting sequences s, s + 1, ... (mod 16) from random starts.
Tensor counting_batch(std::mt19937& rng, int64_t batch, int64_t length) {
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t start = static_cast<int64_t>(rng() % kVocab);
    for (int64_t i = 0; i < length; ++i) ids.push_back((start + i) % kVocab);
  }
  return lt::from_vector(ids, {batch, length});
}

// A token from the last position's logits [1, vocab]: the argmax (greedy), or a draw from the
// k most likely at `temperature` (Gumbel-max over the logits outside the top k masked out).
Tensor next_token(const Tensor& logits, int64_t top_k, double temperature) {
  if (top_k <= 1) return logits.argmax(-1, /*keepdim=*/true);
  const Tensor scaled = logits / temperature;
  // The k-th largest logit: the maximum, taken out k - 1 times.
  Tensor rest = scaled;
  for (int64_t i = 1; i < top_k; ++i) {
    rest =
        rest.masked_fill(rest.ge(rest.max({-1}, true)), -std::numeric_limits<double>::infinity());
  }
  const Tensor kept =
      scaled.masked_fill(scaled.lt(rest.max({-1}, true)), -std::numeric_limits<double>::infinity());
  const Tensor gumbel = -(-(lt::rand(kept.shape()) + 1e-9).log()).log();
  return (kept + gumbel).argmax(-1, /*keepdim=*/true);
}

// Continues `prompt` by `tokens` tokens; reads each one as it is made (no mark_step needed: a
// read keeps what it computed, so the context is data again after each token).
std::vector<int64_t> generate(const Gpt& model, const std::vector<int64_t>& prompt, int tokens,
                              int64_t top_k, double temperature) {
  const lt::NoGradGuard no_grad;
  Tensor context = lt::from_vector(prompt, {1, static_cast<int64_t>(prompt.size())});
  std::vector<int64_t> out;
  for (int i = 0; i < tokens && context.shape()[1] < kContext; ++i) {
    const Tensor logits = model.forward(context).select(1, -1);  // the last position: [1, vocab]
    const Tensor next = next_token(logits, top_k, temperature);
    context = lt::cat({context, next}, 1);
    out.push_back(static_cast<int64_t>(next.item()));
  }
  return out;
}

void print(const char* what, const std::vector<int64_t>& tokens) {
  std::printf("%s:", what);
  for (int64_t t : tokens) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  const int tokens = argc > 1 ? std::atoi(argv[1]) : 40;
  lt::manual_seed(0);
  Gpt model;
  lt::mark_step();
  lt::optim::AdamW optimizer(model.parameters(), {.lr = 3e-3});
  std::mt19937 rng(1);
  double loss_value = 0;
  for (int step = 0; step < 150; ++step) {
    // Each batch of its own length, 8 to 100 tokens: one compiled graph for all of them.
    const int64_t length = 8 + static_cast<int64_t>(rng() % 93);
    const Tensor ids = counting_batch(rng, 16, length);
    const Tensor logits = model.forward(ids.slice(1, 0, length - 1));
    const Tensor loss =
        lt::cross_entropy(logits.reshape({-1, kVocab}), ids.slice(1, 1, length).reshape({-1}));
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    lt::mark_step();
    if (step == 149) loss_value = loss.item();
  }
  std::printf("trained to count on 150 lengths: loss %.4f, graphs compiled: %lld\n", loss_value,
              static_cast<long long>(lt::metrics::counter_value("UncachedCompile")));
  const int64_t compiles_before = lt::metrics::counter_value("UncachedCompile");
  model.eval();
  const std::vector<int64_t> prompt{3, 4, 5, 6};
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> greedy = generate(model, prompt, tokens, 1, 1.0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("greedy (%.3f s):", seconds);
  for (int64_t t : greedy) std::printf(" %lld", static_cast<long long>(t));
  std::printf("\n");
  print("top-3 at temperature 4", generate(model, prompt, tokens, 3, 4.0));
  bool counts = true;
  for (size_t i = 0; i < greedy.size(); ++i)
    counts = counts && greedy[i] == int64_t(7 + i) % kVocab;
  std::printf("greedy continues the count: %s\n", counts ? "yes" : "no");
  std::printf(
      "graphs compiled for %d tokens of each kind: %lld\n", tokens,
      static_cast<long long>(lt::metrics::counter_value("UncachedCompile") - compiles_before));
  return counts ? 0 : 1;
}
