// The lazytensor command.
#include <dlfcn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "adamw_command.h"
#include "lazytensor/lazytensor.h"
#include "plot_command.h"
#include "scaling_command.h"
#include "train_command.h"

namespace {

// A short tour: trace, mark_step, the compile cache and the metrics report.
int run_demo(int steps) {
  lt::Tensor p = lt::randn({1024, 1024}, 1);
  lt::Tensor g = lt::randn({1024, 1024}, 2).mul_(1e-3);
  lt::Tensor m = lt::zeros({1024, 1024});
  lt::mark_step();
  for (int step = 1; step <= steps; ++step) {
    m.mul_(0.9).add_(g, 0.1);
    p.add_(m, -1e-3 * step);
    lt::mark_step();
  }
  std::printf("p[0] = %.6f after %d steps\n", p.to_vector()[0], steps);
  std::printf("%s", lt::metrics::report().c_str());
  return 0;
}

// The GEMM libraries' threads, told to sleep when idle. oneDNN runs its products on OpenMP
// threads, which by libgomp's default spin for a while after each product; OpenBLAS's thread
// server (f64 products, and bf16 ones where oneDNN has no bf16 kernel) spins, yielding, for 2^28
// cycles (about 0.1 s). On a few cores either takes the cores from the engine's own threads,
// which run the kernels between the products: a `mini` BERT step up to a fifth slower on 2
// cores with libgomp's default, and with OpenBLAS's the glue of a bf16 `mini` step a quarter
// slower (median of five pairs of runs, 178 against 137 ms). 2^18 cycles (about 0.1 ms) still
// keeps OpenBLAS's threads awake between back-to-back products. Both libraries read their
// setting once, as they load, before main; so unless the user chose one, the command runs itself
// again with them set. Not for a library that is not loaded (nothing to set), nor when started
// through the dynamic loader (/proc/self/exe is the loader then); a failed exec carries on as it
// is. Setting the variables also keeps it from happening (under valgrind, say, which does not
// follow an exec by default).
struct SleepingThreadsSetting {
  const char* library;
  const char* variable;
  const char* value;
};
constexpr SleepingThreadsSetting kSleepingThreads[] = {
    {"libgomp.so.1", "OMP_WAIT_POLICY", "PASSIVE"},
    {"libopenblas.so.0", "OPENBLAS_THREAD_TIMEOUT", "18"},
};

void prefer_sleeping_library_threads(char** argv) {
  std::vector<const SleepingThreadsSetting*> missing;
  for (const SleepingThreadsSetting& setting : kSleepingThreads) {
    if (std::getenv(setting.variable) != nullptr) continue;
    if (dlopen(setting.library, RTLD_NOLOAD | RTLD_LAZY) == nullptr) continue;
    missing.push_back(&setting);
  }
  if (missing.empty()) return;
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) return;
  self[length] = '\0';
  if (std::string_view(self).find("/ld-linux") != std::string_view::npos) return;
  for (const SleepingThreadsSetting* setting : missing) {
    if (setenv(setting->variable, setting->value, 1) != 0) return;
  }
  execv(self, argv);
}

int run_params(const std::string& model) {
  auto specs = lt::models::parameter_shapes(model);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& spec : specs) {
    tensors.push_back({{"name", spec.name}, {"shape", spec.shape.to_vector()}});
  }
  nlohmann::json out = {
      {"model", model}, {"tensors", tensors}, {"params", lt::models::parameter_count(specs)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  prefer_sleeping_library_threads(argv);
  CLI::App app{"lazytensor: a lazy-tensor engine"};
  app.require_subcommand(1);

  int demo_steps = 5;
  auto* demo = app.add_subcommand("demo", "trace a few steps and print the metrics report");
  demo->add_option("--steps", demo_steps, "steps to run")->check(CLI::PositiveNumber);

  std::string params_model = "bert-large";
  auto* params = app.add_subcommand("params", "print a model's parameter shapes as JSON");
  params->add_option("--model", params_model, "tiny, bert-base or bert-large");

  lt::tools::AdamWCommandOptions adamw_options;
  auto* adamw = app.add_subcommand("adamw", "HuggingFace AdamW steps over a model's parameters");
  adamw->add_option("--model", adamw_options.model, "tiny, bert-base or bert-large")
      ->capture_default_str();
  adamw->add_option("--steps", adamw_options.steps, "optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  adamw->add_option("--scalars", adamw_options.scalars, "argument, cached, uncached or constant")
      ->capture_default_str();
  adamw->add_option("--clip-norm", adamw_options.clip_norm, "clip gradients to this global norm");
  adamw->add_option("--schedule", adamw_options.schedule, "constant, linear or cosine")
      ->capture_default_str();
  adamw->add_option("--warmup", adamw_options.warmup, "warm-up steps (default: a tenth)");
  adamw->add_option("--lr", adamw_options.lr, "learning rate")->capture_default_str();
  adamw
      ->add_option("--precision", adamw_options.precision,
                   "fp32 (f32 parameters, gradients, moments); mixed (bf16 parameters and "
                   "gradients, f32 masters and moments); bf16 (everything bf16, stochastically "
                   "rounded); 8bit (bf16 parameters and gradients, block-wise 8-bit moments)")
      ->capture_default_str();
  adamw->add_option("--weight-decay", adamw_options.weight_decay, "weight decay")
      ->capture_default_str();
  adamw
      ->add_option("--roofline-steps", adamw_options.roofline_steps,
                   "extra steps timed alone against the roofline kernel (0: skip)")
      ->capture_default_str();
  adamw->add_flag("--compare", adamw_options.compare,
                  "run the four scalar policies one after another, side by side");
  adamw->add_flag("--quiet", adamw_options.quiet, "no progress line");
  adamw->add_flag("--zero", adamw_options.zero,
                  "ZeRO stage 1: each rank keeps the optimizer state of 1/N of the parameters "
                  "(under mpirun -np N)");
  adamw->add_option("--json", adamw_options.json_path, "write the results as JSON");
  adamw->add_option("--trace", adamw_options.trace_path, "write a Chrome trace-event timeline");
  adamw->add_option("--dump", adamw_options.dump_dir,
                    "write starting parameters, gradients and final parameters (raw f32) here");

  lt::tools::ScalingCommandOptions scaling_options;
  auto* scaling = app.add_subcommand(
      "scaling", "scalar policies against the number of parameter tensors (HF AdamW)");
  scaling->add_option("--tensors", scaling_options.tensor_counts, "numbers of tensors to try")
      ->capture_default_str();
  scaling->add_option("--size", scaling_options.tensor_size, "elements per tensor")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  scaling->add_option("--steps", scaling_options.steps, "steps per run (at least 3)")
      ->check(CLI::Range(3, 1000000))
      ->capture_default_str();
  scaling->add_option("--json", scaling_options.json_path, "write the table as JSON");

  lt::tools::TrainCommandOptions train_options;
  auto* train = app.add_subcommand(
      "train", "train BERT (masked-language model) on real text, from scratch or MiniLM's weights");
  train->add_option("--model", train_options.model, "tiny, mini, base or large")
      ->check(CLI::IsMember({"tiny", "mini", "base", "large"}))
      ->capture_default_str();
  train
      ->add_option("--init", train_options.init,
                   "random, minilm (all-MiniLM-L6-v2, from `make models`) or a safetensors file")
      ->capture_default_str();
  train->add_option("--data", train_options.data, "a UTF-8 text file or a folder of them")
      ->capture_default_str();
  train->add_option("--steps", train_options.steps, "optimizer steps in all")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--batch", train_options.batch, "sequences per step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  train->add_option("--seq", train_options.seq, "tokens per sequence")
      ->check(CLI::Range(3, 512))
      ->capture_default_str();
  train->add_option("--lr", train_options.lr, "peak learning rate")->capture_default_str();
  train->add_option("--warmup", train_options.warmup, "warm-up steps (default: a tenth)");
  train->add_option("--schedule", train_options.schedule, "constant, linear or cosine")
      ->check(CLI::IsMember({"constant", "linear", "cosine"}))
      ->capture_default_str();
  train->add_option("--clip-norm", train_options.clip_norm, "global gradient norm (0: no clipping)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--weight-decay", train_options.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str();
  train
      ->add_option("--precision", train_options.precision,
                   "fp32, or bf16: autocast (matrix products on bf16 copies with f32 sums; "
                   "f32 weights, optimizer, softmax, layer norm and loss)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  train
      ->add_option("--optimizer-precision", train_options.optimizer_precision,
                   "AdamW's state: fp32, bf16 (moments, weights kept f32) or 8bit (block-wise "
                   "quantized moments)")
      ->check(CLI::IsMember({"fp32", "bf16", "8bit"}))
      ->capture_default_str();
  train
      ->add_option("--mlm-head", train_options.mlm_head,
                   "predicted: the MLM head at the predicted tokens only (BERT's pretraining); "
                   "all: at every position (HuggingFace's BertForMaskedLM); the same loss")
      ->check(CLI::IsMember({"predicted", "all"}))
      ->capture_default_str();
  train
      ->add_option("--dropout", train_options.dropout,
                   "dropout probability (default: the model's 0.1)")
      ->check(CLI::Range(0.0, 0.99));
  train->add_option("--scalars", train_options.scalars, "argument, cached, uncached or constant")
      ->check(CLI::IsMember({"argument", "cached", "uncached", "constant"}))
      ->capture_default_str();
  train->add_option("--seed", train_options.seed, "initial weights, batch order, masks, dropout")
      ->capture_default_str();
  train->add_option("--eval-every", train_options.eval_every,
                    "held-out loss every K steps (default: ten times a run)");
  train->add_option("--eval-batches", train_options.eval_batches, "held-out batches per evaluation")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train->add_option("--json", train_options.json_path,
                    "write the metrics as JSON (and the loss curve as PNG beside it)");
  train->add_option("--plot", train_options.plot_path, "write the loss curve here (PNG)");
  train->add_option("--trace", train_options.trace_path, "write a Chrome trace-event timeline");
  train->add_option("--save", train_options.save_path,
                    "write a checkpoint (safetensors) at the end, and every --save-every steps");
  train->add_option("--save-every", train_options.save_every, "checkpoint period in steps")
      ->check(CLI::NonNegativeNumber);
  train->add_option("--resume", train_options.resume_path, "continue from a checkpoint");
  train->add_option(
      "--export-batches", train_options.export_batches_path,
      "write the masked batches of the run (safetensors), for the PyTorch parity check");
  train->add_flag("--compare", train_options.compare,
                  "the same steps under each scalar policy, side by side");
  train->add_flag("--quiet", train_options.quiet, "no progress bar");

  lt::tools::PlotCommandOptions plot_options;
  auto* plot = app.add_subcommand("plot", "the loss curves of several `train --json` reports");
  plot->add_option("runs", plot_options.runs, "train reports (JSON)")
      ->required()
      ->check(CLI::ExistingFile);
  plot->add_option("--out", plot_options.out_path, "the PNG to write")->required();
  plot->add_option("--title", plot_options.title, "default: the first run's model and batch");
  plot->add_flag("--all-training", plot_options.all_training,
                 "every run's training loss (default: the first run's only)");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*demo) return run_demo(demo_steps);
    if (*params) return run_params(params_model);
    if (*adamw) return lt::tools::run_adamw_command(adamw_options);
    if (*scaling) return lt::tools::run_scaling_command(scaling_options);
    if (*train) return lt::tools::run_train_command(train_options);
    if (*plot) return lt::tools::run_plot_command(plot_options);
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "lazytensor: %s\n", e.what());
    // Under mpirun the other ranks would wait in their next collective until the timeout:
    // the job ends now.
    if (lt::distributed::world_size() > 1) {
      std::fflush(stderr);
      lt::distributed::abort(1);
    }
    return 1;
  }
  return 0;
}
