#pragma once
#include <string>

namespace lt::tools {

struct AdamWCommandOptions {
  std::string model = "bert-base";
  int steps = 20;
  std::string scalars = "argument";
  double clip_norm = 0;  // 0: no clipping
  std::string schedule = "constant";
  int warmup = -1;  // -1: a tenth of the steps
  double lr = 1e-3;
  double weight_decay = 0.01;
  int roofline_steps = 5;
  bool compare = false;
  bool quiet = false;
  std::string json_path, trace_path, dump_dir;
};

// `lazytensor adamw`: HuggingFace AdamW steps over a model's parameter shapes.
int run_adamw_command(const AdamWCommandOptions& options);

}  // namespace lt::tools
