// The `lazytensor` command, run as a subprocess on tiny models with the kernel interpreter: its
// exit status, its JSON report, its trace, its parameter listing, its dump and its comparison
// table; `train`'s report, plot, checkpoints (resumed after a kill) and bad checkpoints.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "lazytensor/safetensors.h"
#include "test_support.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Counters every report must list: torch-xla's, as include/lazytensor/metrics.h names them.
const std::vector<std::string> kCounterNames = {"MarkStep",
                                                "CachedCompile",
                                                "UncachedCompile",
                                                "TransferToDeviceSync",
                                                "TransferToDeviceAsync",
                                                "TransferFromDevice",
                                                "DeviceDataCacheHit",
                                                "DeviceDataCacheMiss",
                                                "ExecuteComputation",
                                                "KernelLaunch"};

struct Outcome {
  int exit_code = -1;  // -1 when the command did not exit by itself
  std::string out, err;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

json read_json(const fs::path& path) {
  const std::string text = read_text(path);
  EXPECT_TRUE(json::accept(text)) << path << " is not JSON: " << text.substr(0, 200);
  return json::parse(text, nullptr, /*allow_exceptions=*/false);
}

std::vector<float> read_floats(const fs::path& path) {
  const std::string bytes = read_text(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

int64_t sum(const std::vector<int64_t>& values, size_t from) {
  return from >= values.size() ? 0
                               : std::accumulate(values.begin() + from, values.end(), int64_t{0});
}

class CliTest : public testing::Test {
 protected:
  // Runs the command with `args`, its output going to files under dir_. The interpreter keeps
  // each run to seconds; a run that outlives `timeout_seconds` is killed and fails the test.
  // With `kill_when`, the run is killed (SIGKILL, as a crash) as soon as that file exists.
  Outcome run(const std::vector<std::string>& args, double timeout_seconds = 120,
              const fs::path& kill_when = {}) {
    const fs::path out_path = dir_.path() / "stdout.txt";
    const fs::path err_path = dir_.path() / "stderr.txt";
    std::vector<std::string> env = {"LT_COMPILER=interpreter"};
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::string(*e).rfind("LT_COMPILER=", 0) != 0) env.emplace_back(*e);
    }
    std::vector<char*> envp, argv = {const_cast<char*>(LT_CLI_PATH)};
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> arg_copies = args;
    for (std::string& a : arg_copies) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, LT_CLI_PATH, &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    Outcome result;
    if (spawned != 0) {
      ADD_FAILURE() << "cannot run " << LT_CLI_PATH << ": " << std::strerror(spawned);
      return result;
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (!kill_when.empty() && fs::exists(kill_when)) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "lazytensor did not finish within " << timeout_seconds << " s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
    result.out = read_text(out_path);
    result.err = read_text(err_path);
    return result;
  }

  const lt_test::TempDir dir_;  // removed with the test's files when the test ends
};

TEST_F(CliTest, AdamwWritesJsonReportAndTrace) {
  const fs::path report_path = dir_.path() / "report.json";
  const fs::path trace_path = dir_.path() / "trace.json";
  const Outcome r = run({"adamw", "--model", "tiny", "--steps", "5", "--quiet", "--roofline-steps",
                         "2", "--json", report_path.string(), "--trace", trace_path.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  const json report = read_json(report_path);
  ASSERT_TRUE(report.is_object());
  for (const char* field :
       {"model", "params", "tensors", "steps", "scalar_policy", "step_seconds",
        "step_seconds_median", "ops_per_step", "trace_seconds_median", "roofline_gbs",
        "effective_gbs", "roofline_fraction", "peak_device_bytes", "counters",
        "counters_after_first_step", "compiles_per_step", "sync_transfers_per_step"}) {
    ASSERT_TRUE(report.contains(field)) << field;
  }
  const auto specs = lt::models::parameter_shapes("tiny");
  const int64_t params = lt::models::parameter_count(specs);
  EXPECT_EQ(report["model"], "tiny");
  EXPECT_EQ(report["params"], params);
  EXPECT_EQ(report["tensors"], specs.size());
  EXPECT_EQ(report["steps"], 5);
  EXPECT_EQ(report["scalar_policy"], "argument");
  ASSERT_TRUE(report["step_seconds"].is_array());
  EXPECT_EQ(report["step_seconds"].size(), 5u);
  for (const json& seconds : report["step_seconds"]) EXPECT_GE(seconds.get<double>(), 0);
  EXPECT_GT(report["step_seconds_median"].get<double>(), 0);
  EXPECT_GT(report["ops_per_step"].get<int64_t>(), 0);
  EXPECT_GT(report["trace_seconds_median"].get<double>(), 0);
  EXPECT_GT(report["roofline_gbs"].get<double>(), 0);
  EXPECT_GT(report["effective_gbs"].get<double>(), 0);
  EXPECT_GT(report["roofline_fraction"].get<double>(), 0);
  // Parameters, gradients and both moments are all on the device after the first step.
  EXPECT_GE(report["peak_device_bytes"].get<int64_t>(), 16 * params);

  const json& counters = report["counters"];
  const json& after_first = report["counters_after_first_step"];
  ASSERT_TRUE(counters.is_object());
  ASSERT_TRUE(after_first.is_object());
  std::string missing;  // one failure listing them all
  for (const std::string& name : kCounterNames) {
    if (!counters.contains(name) || !after_first.contains(name)) missing += " " + name;
  }
  EXPECT_EQ(missing, "") << "counters missing from the report";
  EXPECT_EQ(counters.value("MarkStep", -1), 5);

  // The first step compiles and no later one does: the optimizer state exists before step 1.
  const auto compiles = report["compiles_per_step"].get<std::vector<int64_t>>();
  ASSERT_EQ(compiles.size(), 5u);
  EXPECT_GE(compiles[0], 1);
  EXPECT_EQ(sum(compiles, 1), 0) << report["compiles_per_step"].dump();
  EXPECT_EQ(counters.value("UncachedCompile", -1), sum(compiles, 0));
  EXPECT_EQ(after_first.value("UncachedCompile", -1), sum(compiles, 1));
  EXPECT_EQ(sum(report["sync_transfers_per_step"].get<std::vector<int64_t>>(), 0), 0);

  const json trace = read_json(trace_path);
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  std::map<std::string, int64_t> spans;  // complete ("X") events by name
  for (const json& event : trace["traceEvents"]) {
    if (event.value("ph", "") == "X") ++spans[event.value("name", "")];
  }
  EXPECT_EQ(spans["mark_step"], 5);
  EXPECT_EQ(spans["execute"], counters.value("ExecuteComputation", -1));
  EXPECT_GE(spans["execute"], 5);
}

TEST_F(CliTest, ParamsReportsBertShapes) {
  struct Expected {
    std::string model;
    size_t tensors;
    int64_t params;
  };
  for (const Expected& want :
       {Expected{"bert-large", 391, 335141888}, Expected{"bert-base", 199, 109482240}}) {
    SCOPED_TRACE(want.model);
    const Outcome r = run({"params", "--model", want.model});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_TRUE(json::accept(r.out)) << r.out.substr(0, 200);
    const json listing = json::parse(r.out);
    EXPECT_EQ(listing["model"], want.model);
    EXPECT_EQ(listing["params"], want.params);
    ASSERT_EQ(listing["tensors"].size(), want.tensors);
    int64_t total = 0;
    for (const json& tensor : listing["tensors"]) {
      EXPECT_TRUE(tensor["name"].is_string());
      int64_t numel = 1;
      for (const json& dim : tensor["shape"]) numel *= dim.get<int64_t>();
      total += numel;
    }
    EXPECT_EQ(total, want.params);
  }
}

// `devices` lists every kind with whether it is available and why not; LT_DEVICE naming an
// unavailable one makes a command fail with that reason, not crash or hang.
TEST_F(CliTest, DevicesTellWhatIsAvailableAndLtDeviceChoosesOne) {
  const fs::path listing = dir_.path() / "devices.json";
  const Outcome r = run({"devices", "--json", listing.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(listing);
  const json kinds = json::parse(in);
  ASSERT_EQ(kinds.size(), 3u);
  EXPECT_EQ(kinds[0]["name"], "cpu");
  EXPECT_EQ(kinds[0]["available"], true);
  for (const json& kind : kinds) {
    EXPECT_NE(r.out.find(kind["name"].get<std::string>()), std::string::npos);
    if (!kind["available"].get<bool>()) {
      EXPECT_NE(r.out.find(kind["reason"].get<std::string>()), std::string::npos);
    }
  }
  // LT_DEVICE chooses the device the command runs on: an available kind runs it, an
  // unavailable one fails it with the reason `devices` gives.
  for (const json& kind : kinds) {
    const std::string name = kind["name"].get<std::string>();
    SCOPED_TRACE(name);
    setenv("LT_DEVICE", name.c_str(), 1);
    const Outcome chosen = run({"demo", "--steps", "1"});
    unsetenv("LT_DEVICE");
    if (kind["available"].get<bool>()) {
      EXPECT_EQ(chosen.exit_code, 0) << chosen.err;
    } else {
      EXPECT_EQ(chosen.exit_code, 1);
      EXPECT_NE(chosen.err.find(name + ":0 is unavailable: " + kind["reason"].get<std::string>()),
                std::string::npos)
          << chosen.err;
    }
  }
  setenv("LT_DEVICE", "tpu", 1);
  const Outcome unknown = run({"demo", "--steps", "1"});
  unsetenv("LT_DEVICE");
  // A name that is no device: an error naming the variable, not a crash.
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("LT_DEVICE: device 'tpu'"), std::string::npos) << unknown.err;
}

// codegen-check compiles every fused kernel of a training step for sm_90 with NVRTC, without a
// GPU, and every routine the CUDA backend has (folds, products, gathers, copies): all compile,
// with no spills and at most 128 registers. Skipped without the toolkit.
TEST_F(CliTest, CodegenCheckCompilesAStepsKernelsForCuda) {
  const fs::path report = dir_.path() / "codegen.json";
  const Outcome r =
      run({"codegen-check", "--device", "cuda", "--model", "tiny", "--json", report.string()});
  if (r.exit_code != 0 && r.err.find("no NVRTC") != std::string::npos) GTEST_SKIP() << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(report);
  const json j = json::parse(in);
  EXPECT_EQ(j["arch"], "sm_90");
  EXPECT_TRUE(j["compiled"].get<bool>());
  EXPECT_GT(j["opaque_ops"].get<int>(), 0);
  ASSERT_GT(j["kernels"].size(), 50u);
  std::set<std::string> names;
  for (const json& kernel : j["kernels"]) names.insert(kernel["name"].get<std::string>());
  for (const char* routine : {"lt_fold_f32_f32", "lt_matmul_bf16_bf16", "lt_copy_4",
                              "lt_index_add_f32_i64", "lt_check_ids_i64"}) {
    EXPECT_TRUE(names.count(routine)) << routine;
  }
  for (const json& kernel : j["kernels"]) {
    SCOPED_TRACE(kernel.dump());
    EXPECT_TRUE(kernel["compiled"].get<bool>());  // in the binary, with ptxas's report of it
    EXPECT_EQ(kernel["spill_bytes"], 0);
    EXPECT_GT(kernel["registers"].get<int>(), 0);
    EXPECT_LE(kernel["registers"].get<int>(), 128);
  }
}

// Every kernel of a real training step, as OpenCL C, builds on the OpenCL device (PoCL in CI).
TEST_F(CliTest, CodegenCheckBuildsAStepsKernelsForOpenCl) {
  const fs::path report = dir_.path() / "codegen.json";
  const Outcome r =
      run({"codegen-check", "--device", "opencl", "--model", "tiny", "--json", report.string()});
  const char* required = std::getenv("LT_REQUIRE_OPENCL");
  if (r.exit_code != 0 && r.err.find("no OpenCL") != std::string::npos &&
      !(required != nullptr && std::string(required) == "1")) {
    GTEST_SKIP() << r.err;
  }
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(report);
  const json j = json::parse(in);
  EXPECT_FALSE(j["arch"].get<std::string>().empty());  // the device's name
  EXPECT_TRUE(j["compiled"].get<bool>());
  ASSERT_GT(j["kernels"].size(), 50u);
  for (const json& kernel : j["kernels"]) {
    SCOPED_TRACE(kernel.dump());
    EXPECT_TRUE(kernel["compiled"].get<bool>());
  }
}

// The commands on the OpenCL device match their CPU runs: `train` (dropout on: its
// counter-based masks are the same bits on every device) within 1e-3 of the CPU's losses, and
// `adamw`'s updated parameters within f32 roundings; after the first step, neither compiles
// nor uploads synchronously, on bert-base's 199 tensors too.
TEST_F(CliTest, TrainAndAdamwOnOpenClMatchTheCpu) {
  const char* required = std::getenv("LT_REQUIRE_OPENCL");
  for (const lt::DeviceKind& kind : lt::device_kinds()) {
    if (kind.name == "opencl" && !kind.available) {
      if (required != nullptr && std::string(required) == "1") FAIL() << kind.reason;
      GTEST_SKIP() << kind.reason;
    }
  }
  std::map<std::string, json> train;
  std::map<std::string, fs::path> dumps;
  for (const char* device : {"cpu", "opencl"}) {
    SCOPED_TRACE(device);
    setenv("LT_DEVICE", device, 1);
    const fs::path report = dir_.path() / (std::string(device) + ".json");
    const Outcome t = run({"train", "--model", "tiny", "--steps", "5", "--batch", "4", "--seq",
                           "32", "--json", report.string(), "--quiet"},
                          300);
    dumps[device] = dir_.path() / (std::string("dump-") + device);
    const Outcome a = run({"adamw", "--model", "tiny", "--steps", "3", "--dump",
                           dumps[device].string(), "--quiet", "--roofline-steps", "0"},
                          300);
    unsetenv("LT_DEVICE");
    ASSERT_EQ(t.exit_code, 0) << t.err;
    ASSERT_EQ(a.exit_code, 0) << a.err;
    train[device] = read_json(report);
    EXPECT_EQ(train[device]["device"], std::string(device) + ":0");
  }
  const auto cpu = train["cpu"]["losses"].get<std::vector<double>>();
  const auto opencl = train["opencl"]["losses"].get<std::vector<double>>();
  ASSERT_EQ(cpu.size(), opencl.size());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(opencl[i], cpu[i], 1e-3 * cpu[i]) << i;
  // Per step: nothing after the first.
  const auto none_after_first = [](const json& per_step) {
    const auto counts = per_step.get<std::vector<int64_t>>();
    return counts.size() > 1 &&
           std::all_of(counts.begin() + 1, counts.end(), [](int64_t n) { return n == 0; });
  };
  EXPECT_TRUE(none_after_first(train["opencl"]["compiles_per_step"]));
  EXPECT_TRUE(none_after_first(train["opencl"]["sync_transfers_per_step"]));
  const json manifest = read_json(dumps["cpu"] / "manifest.json");
  for (const json& entry : manifest["tensors"]) {
    const std::string file = entry["param_after"].get<std::string>();
    const std::vector<float> want = read_floats(dumps["cpu"] / file);
    const std::vector<float> got = read_floats(dumps["opencl"] / file);
    ASSERT_EQ(got.size(), want.size()) << file;
    size_t bad = 0;
    for (size_t k = 0; k < want.size(); ++k) {
      bad += !(std::abs(got[k] - want[k]) <= 1e-6f + 1e-5f * std::abs(want[k]));
    }
    EXPECT_EQ(bad, 0u) << file;
  }
  setenv("LT_DEVICE", "opencl", 1);
  const fs::path base = dir_.path() / "base.json";
  const Outcome b = run({"adamw", "--model", "bert-base", "--steps", "3", "--json", base.string(),
                         "--quiet", "--roofline-steps", "0"},
                        300);
  unsetenv("LT_DEVICE");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  const json j = read_json(base);
  EXPECT_EQ(j["device"], "opencl:0");
  EXPECT_TRUE(none_after_first(j["compiles_per_step"])) << j["compiles_per_step"];
  EXPECT_TRUE(none_after_first(j["sync_transfers_per_step"])) << j["sync_transfers_per_step"];
}

// The dump lets outside checks replay the steps in PyTorch: the files must hold every tensor,
// and the final parameters must be HuggingFace AdamW's.
TEST_F(CliTest, AdamwDumpWritesManifestAndRawTensors) {
  const fs::path dump = dir_.path() / "dump";
  const Outcome r = run({"adamw", "--model", "tiny", "--steps", "3", "--dump", dump.string(),
                         "--quiet", "--roofline-steps", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json manifest = read_json(dump / "manifest.json");
  const auto specs = lt::models::parameter_shapes("tiny");
  EXPECT_EQ(manifest["model"], "tiny");
  const int steps = manifest["steps"].get<int>();
  EXPECT_EQ(steps, 3);
  ASSERT_EQ(manifest["tensors"].size(), specs.size());
  const auto lr = manifest["lr"].get<double>();
  const auto beta1 = manifest["beta1"].get<double>();
  const auto beta2 = manifest["beta2"].get<double>();
  const auto eps = manifest["eps"].get<double>();
  const auto weight_decay = manifest["weight_decay"].get<double>();

  for (size_t i = 0; i < specs.size(); ++i) {
    const json& entry = manifest["tensors"][i];
    SCOPED_TRACE(entry.dump());
    EXPECT_EQ(entry["name"], specs[i].name);
    EXPECT_EQ(entry["shape"].get<std::vector<int64_t>>(), specs[i].shape.to_vector());
    const auto bytes = static_cast<uintmax_t>(specs[i].shape.numel()) * sizeof(float);
    for (const char* file : {"param", "grad", "param_after"}) {
      ASSERT_EQ(fs::file_size(dump / entry[file].get<std::string>()), bytes) << file;
    }
    // transformers 4.6.0 AdamW with a constant rate and a constant gradient, in double.
    const std::vector<float> p0 = read_floats(dump / entry["param"].get<std::string>());
    const std::vector<float> g = read_floats(dump / entry["grad"].get<std::string>());
    const std::vector<float> after = read_floats(dump / entry["param_after"].get<std::string>());
    size_t bad = 0;
    for (size_t k = 0; k < p0.size(); ++k) {
      double p = p0[k], m = 0, v = 0;
      for (int t = 1; t <= steps; ++t) {
        m = m * beta1 + g[k] * (1 - beta1);
        v = v * beta2 + g[k] * g[k] * (1 - beta2);
        const double step_size = lr * std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
        p -= step_size * m / (std::sqrt(v) + eps);
        p += p * (-lr * weight_decay);
      }
      if (!(std::abs(after[k] - p) <= 1e-6 + 1e-5 * std::abs(p))) ++bad;
    }
    EXPECT_EQ(bad, 0u) << "of " << p0.size() << " elements differ from the reference";
  }
}

TEST_F(CliTest, AdamwCompareShowsEveryPolicy) {
  const Outcome r = run({"adamw", "--model", "tiny", "--steps", "3", "--compare", "--quiet",
                         "--roofline-steps", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Rows: policy, step (ms), trace (ms), sync transfers per step, ...
  std::map<std::string, double> sync_per_step;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream row(line);
    std::string policy;
    double step_ms = 0, trace_ms = 0, sync = 0;
    if (row >> policy >> step_ms >> trace_ms >> sync) sync_per_step[policy] = sync;
  }
  for (const char* policy : {"argument", "cached", "uncached", "constant"}) {
    EXPECT_TRUE(sync_per_step.contains(policy)) << policy << " missing from:\n" << r.out;
  }
  EXPECT_GT(sync_per_step["uncached"], 0) << r.out;
  EXPECT_EQ(sync_per_step["argument"], 0) << r.out;
  // The cache uploads only the values that change (step_size), not every use.
  EXPECT_LT(sync_per_step["cached"], sync_per_step["uncached"]) << r.out;
}

TEST_F(CliTest, UnknownScalarPolicyFails) {
  const Outcome r = run({"adamw", "--model", "tiny", "--steps", "1", "--quiet", "--roofline-steps",
                         "0", "--scalars", "bogus"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
}

// Tiny BERT runs on the fortunes corpus (the test suite's `make test` installs it and MiniLM's
// vocabulary).
const std::vector<std::string> kTinyTrain = {"train", "--model",  "tiny", "--batch",
                                             "4",     "--seq",    "32",   "--lr",
                                             "1e-3",  "--warmup", "2",    "--quiet"};

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_F(CliTest, TrainWritesItsReportPlotAndCheckpoint) {
  const fs::path report_path = dir_.path() / "train.json";
  const fs::path checkpoint = dir_.path() / "ck.safetensors";
  const Outcome r = run(with(kTinyTrain, {"--steps", "6", "--eval-every", "3", "--json",
                                          report_path.string(), "--save", checkpoint.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = read_json(report_path);
  for (const char* field :
       {"model", "params", "steps", "batch", "seq", "losses", "heldout", "tokens_per_second",
        "step_seconds_median", "peak_device_bytes", "counters", "counters_after_first_step"}) {
    EXPECT_TRUE(report.contains(field)) << field;
  }
  EXPECT_EQ(report["model"], "tiny");
  EXPECT_GT(report["params"].get<int64_t>(), 2'000'000);
  ASSERT_EQ(report["losses"].size(), 6u);
  for (const auto& loss : report["losses"]) {
    EXPECT_GT(loss.get<double>(), 5.0);  // near ln(30522) = 10.3 at the start
    EXPECT_LT(loss.get<double>(), 12.0);
  }
  ASSERT_EQ(report["heldout"].size(), 3u);  // steps 0, 3 and 6
  EXPECT_EQ(report["heldout"][2][0], 6);
  EXPECT_GT(report["tokens_per_second"].get<double>(), 0);
  // The first step's new state and activations are memory the OS hands over, page by page.
  EXPECT_GE(report["first_step_system_seconds"].get<double>(), 0);
  EXPECT_GT(report["first_step_page_faults"].get<int64_t>(), 0);
  EXPECT_EQ(sum(report["compiles_per_step"].get<std::vector<int64_t>>(), 1), 0);
  EXPECT_EQ(sum(report["sync_transfers_per_step"].get<std::vector<int64_t>>(), 0), 0);
  EXPECT_EQ(read_text(dir_.path() / "train.png").substr(1, 3), "PNG");

  lt::safetensors::Metadata meta;
  const auto index = lt::safetensors::read_index(checkpoint.string(), &meta);
  EXPECT_EQ(meta["step"], "6");
  EXPECT_EQ(index.front().name, "bert.embeddings.word_embeddings.weight");
  size_t moments = 0;
  for (const auto& t : index) moments += t.name.rfind("optimizer.exp_avg", 0) == 0;
  EXPECT_EQ(moments, 2 * 42u);
}

// Dynamic padding: the fortunes as rows, each batch padded to its longest; its lengths change
// from step to step and no step after the first compiles. The same rows padded to --seq are
// all of one length, with more padding.
TEST_F(CliTest, TrainWithDynamicPaddingCompilesOnceForEveryLength) {
  const auto report_of = [&](const std::vector<std::string>& rows, const std::string& name) {
    const fs::path path = dir_.path() / name;
    std::vector<std::string> args =
        with(kTinyTrain, {"--steps", "8", "--eval-batches", "1", "--json", path.string()});
    args.insert(args.end(), rows.begin(), rows.end());
    const Outcome r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return read_json(path);
  };
  const json dynamic = report_of({"--dynamic-padding"}, "dynamic.json");
  EXPECT_EQ(dynamic["rows"], "documents");
  EXPECT_EQ(dynamic["dynamic_padding"], true);
  const auto lengths = dynamic["lengths_per_step"].get<std::vector<int64_t>>();
  ASSERT_EQ(lengths.size(), 8u);
  EXPECT_GE(dynamic["distinct_lengths"].get<int64_t>(), 3) << dynamic["lengths_per_step"].dump();
  for (int64_t length : lengths) {
    EXPECT_GE(length, 3);
    EXPECT_LE(length, 32);
  }
  EXPECT_EQ(sum(dynamic["compiles_per_step"].get<std::vector<int64_t>>(), 1), 0)
      << dynamic["compiles_per_step"].dump() << " over lengths "
      << dynamic["lengths_per_step"].dump();
  EXPECT_GE(dynamic["size_binds"].get<int64_t>(), 2);

  const json padded = report_of({"--rows", "documents"}, "padded.json");
  EXPECT_EQ(padded["lengths_per_step"], json(std::vector<int64_t>(8, 32)));
  EXPECT_GT(padded["padding_share"].get<double>(), dynamic["padding_share"].get<double>());
  EXPECT_EQ(sum(padded["compiles_per_step"].get<std::vector<int64_t>>(), 1), 0);
}

TEST_F(CliTest, TrainResumedAfterAKillReachesTheBitsOfAnUninterruptedRun) {
  const std::vector<std::string> args =
      with(kTinyTrain, {"--steps", "8", "--eval-every", "4", "--save-every", "3"});
  const fs::path whole = dir_.path() / "whole.safetensors";
  const fs::path crashed = dir_.path() / "crashed.safetensors";
  const fs::path resumed = dir_.path() / "resumed.safetensors";
  ASSERT_EQ(run(with(args, {"--save", whole.string()})).exit_code, 0);
  // Killed as soon as its first checkpoint (step 3) lands; later ones would do as well.
  run(with(args, {"--save", crashed.string()}), 120, crashed);
  ASSERT_TRUE(fs::exists(crashed));
  lt::safetensors::Metadata meta;
  lt::safetensors::read_index(crashed.string(), &meta);
  const Outcome r = run(with(args, {"--resume", crashed.string(), "--save", resumed.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Parameters, optimizer state, generator, losses and held-out losses: the same bytes.
  EXPECT_TRUE(read_text(whole) == read_text(resumed)) << "resumed from step " << meta["step"];
}

// --optimizer-precision 8bit: the checkpoint holds the u8 codes and their block maxima, a run
// resumed from it reaches the bits of an uninterrupted one, its losses follow fp32 state's, and a
// resume under another precision is refused.
TEST_F(CliTest, TrainWithEightBitOptimizerStateResumesAndTracksFp32) {
  const std::vector<std::string> args =
      with(kTinyTrain, {"--steps", "6", "--eval-every", "3", "--save-every", "3"});
  const std::vector<std::string> eight = with(args, {"--optimizer-precision", "8bit"});
  const fs::path whole = dir_.path() / "whole.safetensors";
  const fs::path crashed = dir_.path() / "crashed.safetensors";
  const fs::path resumed = dir_.path() / "resumed.safetensors";
  const fs::path fp32_report = dir_.path() / "fp32.json", eight_report = dir_.path() / "8bit.json";
  ASSERT_EQ(run(with(args, {"--json", fp32_report.string()})).exit_code, 0);
  const Outcome r = run(with(eight, {"--save", whole.string(), "--json", eight_report.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = read_json(eight_report), reference = read_json(fp32_report);
  EXPECT_EQ(report["optimizer_precision"], "8bit");
  for (size_t i = 0; i < report["losses"].size(); ++i) {
    const double loss = report["losses"][i].get<double>();
    EXPECT_NEAR(loss, reference["losses"][i].get<double>(), 0.02 * loss) << "step " << i + 1;
  }
  const auto index = lt::safetensors::read_index(whole.string());
  int codes = 0, maxima = 0;
  for (const auto& t : index) {
    if (t.name.rfind("optimizer.exp_avg.", 0) == 0 && t.dtype == lt::DType::u8) ++codes;
    if (t.name.rfind("optimizer.exp_avg_absmax.", 0) == 0) ++maxima;
  }
  EXPECT_GT(codes, 0);
  EXPECT_EQ(maxima, codes);

  run(with(eight, {"--save", crashed.string()}), 120, crashed);
  ASSERT_TRUE(fs::exists(crashed));
  const Outcome again =
      run(with(eight, {"--resume", crashed.string(), "--save", resumed.string()}));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(read_text(whole) == read_text(resumed));

  const Outcome refused = run(with(args, {"--resume", crashed.string()}));
  EXPECT_EQ(refused.exit_code, 1);
  lt_test::expect_mentions(refused.err, {"8bit", "--optimizer-precision", "fp32"});
}

// --precision bf16: the report says so, the GEMMs' share of device time is a fraction, and
// the losses track an fp32 run's from the same seed; a checkpoint of either resumes the other.
TEST_F(CliTest, TrainUnderAutocastTracksFp32) {
  const std::vector<std::string> args = with(kTinyTrain, {"--eval-every", "2"});
  const fs::path fp32_report = dir_.path() / "fp32.json", bf16_report = dir_.path() / "bf16.json";
  const fs::path checkpoint = dir_.path() / "bf16.safetensors";
  ASSERT_EQ(run(with(args, {"--steps", "4", "--json", fp32_report.string()})).exit_code, 0);
  const Outcome r = run(with(args, {"--steps", "4", "--precision", "bf16", "--json",
                                    bf16_report.string(), "--save", checkpoint.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = read_json(bf16_report), reference = read_json(fp32_report);
  EXPECT_EQ(report["precision"], "bf16");
  EXPECT_EQ(reference["precision"], "fp32");
  EXPECT_EQ(report["matmul_library"], lt::matmul_library(lt::DType::bf16));
  EXPECT_EQ(reference["matmul_library"], lt::matmul_library(lt::DType::f32));
  lt_test::expect_mentions(r.out, {"products: bf16, " + lt::matmul_library(lt::DType::bf16) +
                                   " on " + lt::matmul_isa(lt::DType::bf16)});
  EXPECT_EQ(report["matmul_isa"], lt::matmul_isa(lt::DType::bf16));
  EXPECT_EQ(reference["matmul_isa"], lt::matmul_isa(lt::DType::f32));
  EXPECT_EQ(report["kernel_isa"], "interpreter");  // run() sets LT_COMPILER=interpreter
  // A CPU without bf16 instructions says autocast will not be faster there.
  const std::string isa = lt::matmul_isa(lt::DType::bf16);
  const bool bf16_instructions = isa == "amx" || isa == "avx512_bf16";
  EXPECT_EQ(r.err.find("will not be faster") == std::string::npos, bf16_instructions) << r.err;
  // The weights' copies are made before the first step: one compile for the run.
  EXPECT_EQ(sum(report["compiles_per_step"].get<std::vector<int64_t>>(), 1), 0);
  for (const json* j : {&report, &reference}) {
    EXPECT_GT((*j)["gemm_share"].get<double>(), 0);
    EXPECT_LT((*j)["gemm_share"].get<double>(), 1);
  }
  ASSERT_EQ(report["losses"].size(), reference["losses"].size());
  bool differs = false;
  for (size_t i = 0; i < report["losses"].size(); ++i) {
    const double loss = report["losses"][i].get<double>();
    EXPECT_NEAR(loss, reference["losses"][i].get<double>(), 0.002 * loss) << "step " << i + 1;
    differs = differs || loss != reference["losses"][i].get<double>();
  }
  EXPECT_TRUE(differs) << "--precision bf16 changed no loss";
  const Outcome resumed = run(with(args, {"--steps", "5", "--resume", checkpoint.string()}));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  const Outcome refused = run(with(args, {"--steps", "4", "--precision", "fp16"}));
  EXPECT_NE(refused.exit_code, 0);
  lt_test::expect_mentions(refused.err, {"--precision", "fp16"});
}

// --mlm-head predicted (the default) runs the head at the predicted tokens only: the same losses
// as the head at every position, held-out ones included, and still one compile for the run.
TEST_F(CliTest, TrainHeadAtThePredictedTokensGivesTheLossesOfTheHeadEverywhere) {
  const std::vector<std::string> args = with(kTinyTrain, {"--steps", "4", "--eval-every", "2"});
  const fs::path all_report = dir_.path() / "all.json", predicted_report = dir_.path() / "p.json";
  ASSERT_EQ(run(with(args, {"--mlm-head", "all", "--json", all_report.string()})).exit_code, 0);
  const fs::path checkpoint = dir_.path() / "p.safetensors";
  const Outcome r =
      run(with(args, {"--json", predicted_report.string(), "--save", checkpoint.string()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json predicted = read_json(predicted_report), all = read_json(all_report);
  EXPECT_EQ(predicted["mlm_head"], "predicted");
  EXPECT_EQ(all["mlm_head"], "all");
  EXPECT_EQ(sum(predicted["compiles_per_step"].get<std::vector<int64_t>>(), 1), 0);
  ASSERT_EQ(predicted["losses"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const double loss = all["losses"][i].get<double>();
    EXPECT_NEAR(predicted["losses"][i].get<double>(), loss, 1e-4 * loss) << "step " << i + 1;
  }
  ASSERT_EQ(predicted["heldout"].size(), all["heldout"].size());
  for (size_t i = 0; i < all["heldout"].size(); ++i) {
    const double loss = all["heldout"][i][1].get<double>();
    EXPECT_NEAR(predicted["heldout"][i][1].get<double>(), loss, 1e-4 * loss);
  }
  // Resumed under the other head: allowed, with a warning that the run will differ.
  const Outcome resumed =
      run(with(kTinyTrain, {"--steps", "5", "--mlm-head", "all", "--resume", checkpoint.string()}));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  lt_test::expect_mentions(resumed.err, {"--mlm-head", "\"all\"", "\"predicted\"", "differs"});
  const Outcome refused = run(with(args, {"--mlm-head", "some"}));
  EXPECT_NE(refused.exit_code, 0);
  lt_test::expect_mentions(refused.err, {"--mlm-head", "some"});
}

// `plot` draws several train reports on one chart and names a file that is not one.
TEST_F(CliTest, PlotDrawsTheCurvesOfSeveralRuns) {
  const fs::path a = dir_.path() / "a.json", b = dir_.path() / "b.json";
  ASSERT_EQ(
      run(with(kTinyTrain, {"--steps", "2", "--eval-every", "1", "--json", a.string()})).exit_code,
      0);
  fs::copy_file(a, b);
  const fs::path png = dir_.path() / "both.png";
  const Outcome r = run({"plot", a.string(), b.string(), "--out", png.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_text(png).substr(1, 3), "PNG");
  const fs::path not_a_report = dir_.path() / "a.png";  // the train command's own plot
  const Outcome bad = run({"plot", a.string(), not_a_report.string(), "--out", png.string()});
  EXPECT_EQ(bad.exit_code, 1);
  lt_test::expect_mentions(bad.err, {"plot", "a.png", "not JSON"});
}

TEST_F(CliTest, TrainRefusesCheckpointsThatAreTruncatedOrDoNotFit) {
  const fs::path checkpoint = dir_.path() / "ck.safetensors";
  ASSERT_EQ(run(with(kTinyTrain, {"--steps", "1", "--save", checkpoint.string()})).exit_code, 0);
  const std::string bytes = read_text(checkpoint);
  const fs::path truncated = dir_.path() / "truncated.safetensors";
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  Outcome r = run(with(kTinyTrain, {"--steps", "2", "--resume", truncated.string()}));
  EXPECT_EQ(r.exit_code, 1);
  lt_test::expect_mentions(r.err, {"truncated", "tensor '"});

  r = run({"train", "--model", "tiny", "--batch", "4", "--seq", "16", "--lr", "1e-3", "--warmup",
           "2", "--quiet", "--steps", "2", "--resume", checkpoint.string()});
  EXPECT_EQ(r.exit_code, 1);
  lt_test::expect_mentions(r.err, {"--seq", "32", "16"});

  r = run({"train", "--model", "mini", "--steps", "1", "--quiet", "--init", checkpoint.string()});
  EXPECT_EQ(r.exit_code, 1);
  lt_test::expect_mentions(
      r.err, {"bert.embeddings.word_embeddings.weight", "[30522, 64]", "[30522, 384]"});
}

TEST_F(CliTest, TrainCompareShowsEveryPolicy) {
  const fs::path report_path = dir_.path() / "compare.json";
  const Outcome r = run({"train", "--model", "tiny", "--batch", "2", "--seq", "16", "--steps", "3",
                         "--compare", "--quiet", "--json", report_path.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json report = read_json(report_path);
  std::map<std::string, json> runs;
  for (const auto& run : report["compare"]) runs[run["scalar_policy"]] = run;
  for (const char* policy : {"argument", "cached", "uncached", "constant"}) {
    ASSERT_TRUE(runs.contains(policy)) << policy;
    EXPECT_NE(r.out.find(policy), std::string::npos) << r.out;
    // The same batches and initial weights: the same first loss whatever the policy.
    EXPECT_NEAR(runs[policy]["losses"][0].get<double>(),
                runs["argument"]["losses"][0].get<double>(), 1e-5);
  }
  auto later = [&](const char* policy, const char* field) {
    return sum(runs[policy][field].get<std::vector<int64_t>>(), 1);
  };
  EXPECT_EQ(later("argument", "sync_transfers_per_step"), 0);
  EXPECT_EQ(later("argument", "compiles_per_step"), 0);
  EXPECT_GT(later("uncached", "sync_transfers_per_step"), 0);
  EXPECT_GT(later("constant", "compiles_per_step"), 0) << "a new learning rate, a new graph";
}

}  // namespace
