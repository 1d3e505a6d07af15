// Sizes as kernel arguments, measured on BERT training (batch 8, random initial weights):
//
//   dynamic_sizes_benchmark [model]      (default mini)
//
// 1. A step at length 64 inside a run whose lengths change every step (one compiled graph,
//    sizes bound at launch) against a run that only uses length 64 with a graph compiled for
//    exactly that length (symbolic sizes off). Median step times, several rounds.
// 2. Training tokens a second (real tokens, padding left out) on the fortunes corpus with its
//    documents as rows: each batch padded to its longest row (dynamic padding) against every
//    batch padded to 128, in alternating rounds of the same run.
// Each step is traced, cut and waited for (no overlap of host and device), the same for both
// sides of a comparison.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine_timing.h"
#include "lazytensor/bert.h"
#include "lazytensor/lazytensor.h"
#include "lazytensor/mlm.h"
#include "lazytensor/optim.h"
#include "lazytensor/text.h"

namespace {

using Clock = std::chrono::steady_clock;
using lt::Tensor;

constexpr int64_t kBatch = 8;

struct Trainer {
  lt::models::Bert model;
  lt::optim::AdamW optimizer;
  lt::data::MlmOptions mlm;
  int64_t steps = 0;

  explicit Trainer(const std::string& name)
      : model(lt::models::BertConfig::preset(name)), optimizer(model.parameters(), {}) {
    lt::mark_step();
    lt::wait_device_ops();
  }

  // One training step on host rows [kBatch, length] (attention: 1 for tokens, 0 for padding),
  // traced, cut and waited for; returns its seconds.
  double step(const std::vector<int64_t>& ids, const std::vector<int64_t>& attention,
              int64_t length) {
    const auto start = Clock::now();
    const lt::data::MlmBatch b = lt::data::mask_tokens(ids, kBatch, length, mlm, ++steps);
    const Tensor mask = lt::from_vector(attention, {kBatch, length});
    const Tensor loss =
        model.mlm_loss_at(b.input_ids, b.predicted_positions, b.predicted_labels, mask);
    loss.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : model.parameters()) grads.push_back(p.grad());
    lt::clip_grad_norm_(grads, 1.0);
    optimizer.step();
    optimizer.zero_grad();
    lt::mark_step();
    lt::wait_device_ops();
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Random token rows of one length, all attended.
double step_at(Trainer& t, int64_t length, std::mt19937& rng) {
  std::vector<int64_t> ids(kBatch * length), attention(kBatch * length, 1);
  for (int64_t& id : ids) id = 1000 + static_cast<int64_t>(rng() % 28000);
  return t.step(ids, attention, length);
}

void length_64(Trainer& t) {
  std::mt19937 rng(1);
  const std::vector<int64_t> lengths{48, 64, 96, 64, 128, 40, 64, 112};
  std::vector<double> dynamic, fixed;
  for (int round = 0; round < 4; ++round) {
    lt::set_symbolic_sizes(true);
    for (int64_t length : lengths) {
      const double seconds = step_at(t, length, rng);
      if (round > 0 && length == 64) dynamic.push_back(seconds);
    }
    lt::set_symbolic_sizes(false);
    for (int s = 0; s < 4; ++s) {
      const double seconds = step_at(t, 64, rng);
      if (round > 0 || s > 0) fixed.push_back(seconds);
    }
  }
  lt::set_symbolic_sizes(true);
  const double d = median(dynamic), f = median(fixed);
  std::printf("| step at length 64 | median ms (%zu, %zu steps) |\n|---|---:|\n", fixed.size(),
              dynamic.size());
  std::printf("| graph compiled for exactly 64 (LT_SYMBOLIC_SIZES=0) | %.1f |\n", f * 1e3);
  std::printf("| inside a run of 8 lengths (one graph, sizes bound) | %.1f |\n", d * 1e3);
  std::printf("| ratio | %.3fx |\n\n", d / f);
}

void dynamic_padding(Trainer& t) {
  const std::filesystem::path models =
      std::getenv("LT_MODELS_DIR") ? std::getenv("LT_MODELS_DIR") : LT_MODELS_DIR;
  const lt::text::WordPieceTokenizer tokenizer(
      (models / "all-MiniLM-L6-v2" / "vocab.txt").string());
  std::vector<std::vector<int64_t>> documents;
  for (const auto& doc : lt::text::read_corpus("/usr/share/games/fortunes")) {
    documents.push_back(tokenizer.encode(doc.text));
  }
  const lt::data::DocumentBatches rows(documents, 128, tokenizer.cls_id(), tokenizer.sep_id(),
                                       tokenizer.pad_id(), 7);
  t.mlm.mask_id = tokenizer.mask_id();
  constexpr int kSteps = 20;
  std::vector<double> per_round[2];
  int64_t tokens[2] = {0, 0}, positions[2] = {0, 0};
  for (int round = 0; round < 3; ++round) {
    for (const bool to_longest : {true, false}) {
      double seconds = 0;
      int64_t round_tokens = 0;
      for (int s = 0; s < kSteps; ++s) {
        // Both sides train on the same batches.
        const auto b = rows.shuffled(round * kSteps + s, kBatch, to_longest);
        seconds += t.step(b.ids, b.attention, b.length);
        round_tokens += b.tokens;
        positions[to_longest ? 1 : 0] += b.rows * b.length;
      }
      tokens[to_longest ? 1 : 0] += round_tokens;
      per_round[to_longest ? 1 : 0].push_back(static_cast<double>(round_tokens) / seconds);
    }
  }
  const double longest = median(per_round[1]), padded = median(per_round[0]);
  const auto share = [&](int k) {
    return 100.0 * (1.0 - static_cast<double>(tokens[k]) / static_cast<double>(positions[k]));
  };
  std::printf(
      "| rows: fortunes, cut at 128 | tokens/s (real, median of 3 rounds of %d steps) "
      "| padding |\n|---|---:|---:|\n",
      kSteps);
  std::printf("| every batch padded to 128 | %.0f | %.0f%% |\n", padded, share(0));
  std::printf("| each batch padded to its longest | %.0f | %.0f%% |\n", longest, share(1));
  std::printf("| ratio | %.2fx | |\n", longest / padded);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string model = argc > 1 ? argv[1] : "mini";
  std::printf("CPU: %s; BERT %s, batch %lld, fp32\n\n", lt::bench::cpu_model().c_str(),
              model.c_str(), static_cast<long long>(kBatch));
  Trainer t(model);
  length_64(t);
  dynamic_padding(t);
  const lt::metrics::TimerStats compile = lt::metrics::timer_stats("CompileTime");
  const lt::metrics::TimerStats bind = lt::metrics::timer_stats("BindTime");
  std::printf("\ncompiled graphs: %lld, %.1f ms each (median); sizes bound: %lld, %.1f ms each\n",
              static_cast<long long>(compile.count), compile.median_seconds * 1e3,
              static_cast<long long>(bind.count), bind.median_seconds * 1e3);
  std::printf("the last compile: %s\n", lt::last_recompile_reason().c_str());
  return 0;
}
