#include "scaling_command.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "adamw_command.h"
#include "lazytensor/lazytensor.h"

namespace lt::tools {

// HF AdamW steps over N equal tensors for growing N under each scalar policy: what each policy
// pays per step as the number of parameter tensors grows (torch-xla 1.13's regression grew
// with it).
int run_scaling_command(const ScalingCommandOptions& o) {
  FreshKernelCache fresh_cache;
  const ScalarPolicy policies[] = {ScalarPolicy::uncached, ScalarPolicy::cached,
                                   ScalarPolicy::constant, ScalarPolicy::argument};
  std::printf(
      "HF AdamW, tensors of %lld elements, %d steps (medians over steps 3..%d), kernels: %s\n",
      static_cast<long long>(o.tensor_size), o.steps, o.steps, kernel_compiler().c_str());
  std::printf(
      "(the linear schedule starts at lr 0, which cached and uncached bake in as a constant, so\n"
      " step 2 compiles again under those; the columns count steps 3..%d)\n",
      o.steps);
  std::printf("%8s  %-9s %14s %16s %12s %14s\n", "tensors", "policy", "sync xfer/step",
              "compiles/step", "step (ms)", "host wait/step");
  nlohmann::json rows = nlohmann::json::array();
  for (int n : o.tensor_counts) {
    std::vector<models::ParameterSpec> specs;
    for (int i = 0; i < n; ++i) {
      std::string name = "t";
      name += std::to_string(i);
      specs.push_back({name, Shape{o.tensor_size}});
    }
    for (ScalarPolicy policy : policies) {
      AdamWCommandOptions run;
      run.model = "synthetic";
      run.steps = o.steps;
      run.schedule = "linear";  // the learning rate changes every step, as in training
      run.warmup = 1;
      run.roofline_steps = 0;
      run.quiet = true;
      // A learning rate of its own per run, so that no run finds another's values in the
      // scalar data cache or another's constants in the kernel cache.
      run.lr = 1e-3 * (1.0 + 0.01 * static_cast<double>(rows.size()));
      RunResult r = run_adamw(run, policy, specs);
      int64_t sync = 0, compiles = 0;
      for (size_t k = 2; k < r.sync_transfers.size(); ++k) {
        sync += r.sync_transfers[k];
        compiles += r.compiles[k];
      }
      const double later_steps = static_cast<double>(o.steps - 2);
      const double sync_per_step = static_cast<double>(sync) / later_steps;
      const double compiles_per_step = static_cast<double>(compiles) / later_steps;
      std::vector<double> later(r.step_seconds.begin() + 2, r.step_seconds.end());
      const double step_ms = median(later) * 1e3;
      std::printf("%8d  %-9s %14.1f %16.1f %12.3f %14.3f\n", n, r.policy.c_str(), sync_per_step,
                  compiles_per_step, step_ms, r.host_wait_per_step * 1e3);
      std::fflush(stdout);
      rows.push_back({{"tensors", n},
                      {"policy", r.policy},
                      {"sync_transfers_per_step", sync_per_step},
                      {"compiles_per_step", compiles_per_step},
                      {"step_ms_median", step_ms},
                      {"host_wait_ms_per_step", r.host_wait_per_step * 1e3}});
    }
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << rows.dump(2);
    if (!out) throw Error("scaling --json: cannot write " + o.json_path);
  }
  return 0;
}

Command add_scaling_command(CLI::App& app) {
  auto options = std::make_shared<ScalingCommandOptions>();
  auto* scaling = app.add_subcommand(
      "scaling", "scalar policies against the number of parameter tensors (HF AdamW)");
  scaling->add_option("--tensors", options->tensor_counts, "numbers of tensors to try")
      ->capture_default_str();
  scaling->add_option("--size", options->tensor_size, "elements per tensor")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  scaling->add_option("--steps", options->steps, "steps per run (at least 3)")
      ->check(CLI::Range(3, 1000000))
      ->capture_default_str();
  scaling->add_option("--json", options->json_path, "write the table as JSON");
  return {scaling, [options] { return run_scaling_command(*options); }};
}

}  // namespace lt::tools
