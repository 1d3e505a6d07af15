#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "command.h"
#include "lazytensor/models.h"
#include "lazytensor/runtime.h"

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
  std::string precision = "fp32";
  int roofline_steps = 5;
  bool compare = false;
  bool quiet = false;
  bool zero = false;  // ZeRO stage 1: the state sharded across the ranks
  std::string json_path, trace_path, dump_dir;
};

// What one run of AdamW steps measured.
struct RunResult {
  std::string policy;
  int64_t params = 0, tensors = 0;
  // Bytes a step reads and writes per parameter: the parameters (read and written), the
  // gradients (read) and every state tensor the optimizer keeps (read and written), counted
  // from the tensors' dtypes.
  double bytes_per_param = 0;
  int64_t optimizer_state_bytes = 0;  // on this rank
  std::vector<double> step_seconds, trace_seconds;
  std::vector<int64_t> sync_transfers, compiles, ops;
  std::map<std::string, int64_t> counters_total, counters_after_first;
  double host_wait_per_step = 0;
  double roofline_gbs = 0, effective_gbs = 0, roofline_fraction = 0;
  int64_t peak_device_bytes = 0;
};

// A kernel cache folder of its own for the object's lifetime, so that the constant policy pays
// for its compiles as a fresh training run would, instead of finding an earlier invocation's
// kernels on disk.
class FreshKernelCache {
 public:
  FreshKernelCache();
  ~FreshKernelCache();
  FreshKernelCache(const FreshKernelCache&) = delete;
  FreshKernelCache& operator=(const FreshKernelCache&) = delete;

 private:
  std::string previous_, dir_;
};

// Runs the steps of `o` over `specs` under one scalar policy.
RunResult run_adamw(const AdamWCommandOptions& o, ScalarPolicy policy,
                    const std::vector<models::ParameterSpec>& specs);
double median(std::vector<double> values);
// Shared by the commands' step loops.
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start);
std::map<std::string, int64_t> counters();  // every counter's value now
// A counter's growth from `before` to `after` (0 for one in neither).
int64_t delta(const std::map<std::string, int64_t>& after,
              const std::map<std::string, int64_t>& before, const std::string& name);

// `lazytensor adamw`: HuggingFace AdamW steps over a model's parameter shapes.
int run_adamw_command(const AdamWCommandOptions& options);
// Adds `lazytensor adamw` and its options to `app`.
Command add_adamw_command(CLI::App& app);

}  // namespace lt::tools
