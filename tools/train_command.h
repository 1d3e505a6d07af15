#pragma once
#include <cstdint>
#include <string>

#include "command.h"

namespace lt::tools {

struct TrainCommandOptions {
  std::string model = "mini";                      // tiny, mini, base or large
  std::string init = "random";                     // random, minilm, or a safetensors file
  std::string data = "/usr/share/games/fortunes";  // a UTF-8 text file or a folder of them
  int64_t steps = 100;
  int64_t batch = 8;
  int64_t seq = 128;
  double lr = 1e-4;
  int64_t warmup = -1;  // -1: a tenth of the steps
  std::string schedule = "linear";
  double clip_norm = 1.0;  // 0: no clipping
  double weight_decay = 0.01;
  std::string precision = "fp32";            // fp32, or bf16: autocast (bf16 products)
  std::string optimizer_precision = "fp32";  // AdamW's state: fp32, bf16 or 8bit
  double dropout = -1;                       // -1: the model's (0.1)
  std::string mlm_head = "predicted";        // the MLM head at the predicted tokens, or all
  // Rows: windows of `seq` tokens over the corpus ("windows"), or its documents cut at `seq`
  // ("documents"), padded to `seq` or, with dynamic_padding, to each batch's longest row.
  std::string rows = "windows";
  bool dynamic_padding = false;  // implies rows = documents
  std::string scalars = "argument";
  uint64_t seed = 42;
  int64_t eval_every = -1;  // -1: about ten evaluations per run
  int64_t eval_batches = 4;
  int64_t save_every = 0;  // 0: only at the end
  std::string json_path, trace_path, save_path, resume_path, plot_path, export_batches_path;
  bool compare = false;
  bool quiet = false;
};

// `lazytensor train`: BERT masked-language-model training on real text (docs/training.md,
// "Training BERT").
int run_train_command(const TrainCommandOptions& options);
// Adds `lazytensor train` and its options to `app`.
Command add_train_command(CLI::App& app);

}  // namespace lt::tools
