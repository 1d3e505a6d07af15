// The lazytensor command.
#include <dlfcn.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "adamw_command.h"
#include "command.h"
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

// How long the library threads wait awake when idle. The kernels run on OpenMP's workers, the
// team that runs oneDNN's products (backend/cpu/thread_pool), so a worker that sleeps between
// two launches costs the next launch a wake-up: about 50 us on a 2-vCPU VM, a sixth of a step's
// launches. libgomp's default spins 300,000 turns of its wait loop (about 3 ms by its own
// estimate) after each parallel region, which kept the workers on the cores that OpenBLAS's
// threads and the host's tracing needed (a `mini` step up to a fifth slower on 2 cores);
// OMP_WAIT_POLICY=PASSIVE (0 turns) paid the wake-ups; 30,000 turns keep the workers awake
// between launches and asleep through the host's tracing (bf16 `base` steps 4.6% and `mini`
// steps 8% shorter than with PASSIVE, AMX, four pairs; the OpenBLAS products of a CPU without
// bf16 no slower). OpenBLAS's thread server (f64 products, and bf16 ones where oneDNN has no
// bf16 kernel) spins, yielding, for 2^28 cycles (about 0.1 s): the glue of a bf16 `mini` step a
// quarter slower with it (median of five pairs of runs, 178 against 137 ms); 2^18 cycles (about
// 0.1 ms) still keeps its threads awake between back-to-back products. Both libraries read
// their setting once, as they load, before main; so unless the user chose one (for libgomp,
// either of its variables), the command runs itself again with them set. Not for a library that
// is not loaded (nothing to set), nor when started through the dynamic loader (/proc/self/exe is
// the loader then); a failed exec carries on as it is. Setting the variables also keeps it from
// happening (under valgrind, say, which does not follow an exec by default).
struct ThreadWaitSetting {
  const char* library;
  const char* variable;
  const char* value;
  const char* also_the_users_choice;  // another variable that says the user chose, or null
};
constexpr ThreadWaitSetting kThreadWaits[] = {
    {"libgomp.so.1", "GOMP_SPINCOUNT", "30000", "OMP_WAIT_POLICY"},
    {"libopenblas.so.0", "OPENBLAS_THREAD_TIMEOUT", "18", nullptr},
};

void set_library_thread_waits(char** argv) {
  std::vector<const ThreadWaitSetting*> missing;
  for (const ThreadWaitSetting& setting : kThreadWaits) {
    if (std::getenv(setting.variable) != nullptr) continue;
    if (setting.also_the_users_choice && std::getenv(setting.also_the_users_choice) != nullptr) {
      continue;
    }
    if (dlopen(setting.library, RTLD_NOLOAD | RTLD_LAZY) == nullptr) continue;
    missing.push_back(&setting);
  }
  if (missing.empty()) return;
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) return;
  self[length] = '\0';
  if (std::string_view(self).find("/ld-linux") != std::string_view::npos) return;
  for (const ThreadWaitSetting* setting : missing) {
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

// Each device kind this build knows, and whether this machine can use it (and why not).
int run_devices(const std::string& json_path) {
  nlohmann::json kinds = nlohmann::json::array();
  for (const lt::DeviceKind& kind : lt::device_kinds()) {
    std::printf("%-7s %-13s %s\n", kind.name.c_str(), kind.available ? "available" : "unavailable",
                kind.reason.c_str());
    kinds.push_back({{"name", kind.name}, {"available", kind.available}, {"reason", kind.reason}});
  }
  if (!json_path.empty()) {
    std::FILE* out = std::fopen(json_path.c_str(), "w");
    if (out == nullptr) throw lt::Error("devices: cannot write " + json_path);
    std::fprintf(out, "%s\n", kinds.dump(2).c_str());
    std::fclose(out);
  }
  return 0;
}

lt::tools::Command add_devices_command(CLI::App& app) {
  auto json = std::make_shared<std::string>();
  auto* devices = app.add_subcommand(
      "devices", "list the device kinds (cpu, cuda, opencl), available or why not");
  devices->add_option("--json", *json, "also write them as JSON: [{name, available, reason}]");
  return {devices, [json] { return run_devices(*json); }};
}

// One BERT training step (forward, backward, AdamW) traced and not run, its fused kernels
// rendered for `device` and compiled for `arch` by that kind's compiler: registers, stack and
// spills per kernel, with no GPU needed.
int run_codegen_check(const std::string& device, const std::string& model, const std::string& arch,
                      const std::string& json_path) {
  lt::manual_seed(0);
  lt::models::Bert bert(lt::models::BertConfig::preset(model));
  lt::optim::AdamW optimizer(bert.parameters(), lt::optim::AdamWOptions{});
  lt::mark_step();  // the weights and the optimizer's state are data; the step alone is traced
  const int64_t batch = 8, seq = 128;
  std::vector<int64_t> ids(batch * seq), labels(batch * seq, -100);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(1000 + i * 7919 % 20000);
    if (i % 7 == 0) labels[i] = ids[i];
  }
  const lt::Tensor loss =
      bert.mlm_loss(lt::from_vector(ids, {batch, seq}), lt::from_vector(labels, {batch, seq}));
  loss.backward();
  optimizer.step();
  std::vector<lt::Tensor> step = bert.parameters();
  step.push_back(loss);
  for (size_t g = 0; g < optimizer.groups().size(); ++g) {
    for (size_t p = 0; p < optimizer.groups()[g].params.size(); ++p) {
      step.push_back(optimizer.state(g, p).exp_avg);
      step.push_back(optimizer.state(g, p).exp_avg_sq);
    }
  }
  const lt::CodegenCheck check =
      lt::check_codegen(step, device, arch.empty() && device == "cuda" ? "sm_90" : arch);
  int registers = 0, spills = 0, stack = 0, reductions = 0;
  nlohmann::json kernels = nlohmann::json::array();
  for (const lt::KernelCompileCheck& k : check.kernels) {
    registers = std::max(registers, k.registers);
    spills += k.spill_bytes > 0;
    stack += k.stack_bytes > 0;
    reductions += k.reduction;
    kernels.push_back({{"name", k.name},
                       {"registers", k.registers},
                       {"stack_bytes", k.stack_bytes},
                       {"spill_bytes", k.spill_bytes},
                       {"reduction", k.reduction},
                       {"compiled", k.compiled}});
  }
  // Registers, stack and spills where the compiler reports them (NVRTC's ptxas; OpenCL does not).
  const std::string resources = registers > 0
                                    ? "; at most " + std::to_string(registers) + " registers, " +
                                          std::to_string(spills) + " with spills, " +
                                          std::to_string(stack) + " with a stack"
                                    : "";
  // The step's fused kernels are named lt_kernel_<n>; the rest are the device's routines (folds,
  // products, gathers, copies) for every dtype.
  const size_t routines = static_cast<size_t>(
      std::count_if(check.kernels.begin(), check.kernels.end(),
                    [](const lt::KernelCompileCheck& k) { return k.name.rfind("lt_kernel_", 0); }));
  std::printf(
      "%s %s step for %s (%s): %zu kernels and %zu routines %s%s; %d of the kernels feed "
      "reductions' folds; the step's %d opaque ops run as routines\n",
      model.c_str(), device.c_str(), check.arch.c_str(), check.compiler.c_str(),
      check.kernels.size() - routines, routines, check.compiled ? "compiled" : "FAILED to compile",
      resources.c_str(), reductions, check.opaque_ops);
  if (!json_path.empty()) {
    std::FILE* out = std::fopen(json_path.c_str(), "w");
    if (out == nullptr) throw lt::Error("codegen-check: cannot write " + json_path);
    const nlohmann::json report = {{"device", device},           {"model", model},
                                   {"arch", check.arch},         {"compiler", check.compiler},
                                   {"compiled", check.compiled}, {"opaque_ops", check.opaque_ops},
                                   {"kernels", kernels}};
    std::fprintf(out, "%s\n", report.dump(2).c_str());
    std::fclose(out);
  }
  if (!check.compiled) std::fprintf(stderr, "%s\n", check.log.substr(0, 4000).c_str());
  return check.compiled ? 0 : 1;
}

lt::tools::Command add_codegen_check_command(CLI::App& app) {
  auto device = std::make_shared<std::string>("cuda");
  auto model = std::make_shared<std::string>("base");
  auto arch = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  auto* check = app.add_subcommand(
      "codegen-check", "compile one BERT training step's kernels for a device, without it");
  check->add_option("--device", *device,
                    "the device kind whose code generator runs: cuda (NVRTC) or opencl (the "
                    "OpenCL device's compiler)");
  check->add_option("--model", *model, "tiny, mini, base or large");
  check->add_option("--arch", *arch,
                    "cuda: the target architecture (default sm_90); opencl: the device's own");
  check->add_option("--json", *json,
                    "also write {arch, kernels: [{name, registers, spill_bytes, compiled}]}");
  return {check, [=] { return run_codegen_check(*device, *model, *arch, *json); }};
}

lt::tools::Command add_demo_command(CLI::App& app) {
  auto steps = std::make_shared<int>(5);
  auto* demo = app.add_subcommand("demo", "trace a few steps and print the metrics report");
  demo->add_option("--steps", *steps, "steps to run")->check(CLI::PositiveNumber);
  return {demo, [steps] { return run_demo(*steps); }};
}

lt::tools::Command add_params_command(CLI::App& app) {
  auto model = std::make_shared<std::string>("bert-large");
  auto* params = app.add_subcommand("params", "print a model's parameter shapes as JSON");
  params->add_option("--model", *model, "tiny, bert-base or bert-large");
  return {params, [model] { return run_params(*model); }};
}

}  // namespace

int main(int argc, char** argv) {
  set_library_thread_waits(argv);
  CLI::App app{"lazytensor: a lazy-tensor engine"};
  app.require_subcommand(1);

  // In the order `lazytensor --help` lists them.
  const std::vector<lt::tools::Command> commands = {
      add_demo_command(app),
      add_params_command(app),
      add_devices_command(app),
      add_codegen_check_command(app),
      lt::tools::add_adamw_command(app),
      lt::tools::add_scaling_command(app),
      lt::tools::add_train_command(app),
      lt::tools::add_plot_command(app),
  };
  CLI11_PARSE(app, argc, argv);
  try {
    for (const lt::tools::Command& command : commands) {
      if (*command.app) return command.run();
    }
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
