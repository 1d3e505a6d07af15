#include "adamw_command.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "lazytensor/lazytensor.h"
#include "ranks.h"
#include "roofline.h"

namespace lt::tools {

namespace {

using nlohmann::json;

void write_raw(const std::filesystem::path& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  if (!out) throw Error("adamw --dump: cannot write " + path.string());
}

// Parameters ~ N(0, 0.02^2) and gradients ~ N(0, 1e-6), reproducible by seed. Every
// precision but fp32 is for a bf16 model: bf16 parameters and gradients. Under mpirun each
// rank has gradients of its own (data parallelism), averaged every step.
optim::ParamGroup<optim::AdamWOptions> random_group(
    const AdamWCommandOptions& o, const std::vector<models::ParameterSpec>& specs) {
  optim::ParamGroup<optim::AdamWOptions> group;
  group.options.lr = o.lr;
  group.options.weight_decay = o.weight_decay;
  group.options.precision = optim::parse_precision(o.precision);
  const DType model_dtype =
      group.options.precision == optim::Precision::fp32 ? DType::f32 : DType::bf16;
  const uint64_t rank_seed = static_cast<uint64_t>(distributed::rank()) << 32;
  for (size_t i = 0; i < specs.size(); ++i) {
    group.params.push_back(randn(specs[i].shape, 2 * i + 1).mul_(0.02).to(model_dtype));
    group.grads.push_back(
        randn(specs[i].shape, (2 * i + 2) ^ rank_seed).mul_(1e-3).to(model_dtype));
  }
  return group;
}

// What a run steps: AdamW over every parameter or, with --zero, ZeRO stage 1 (each rank keeps
// the state of its shard; the sharded step reduce-scatters the gradients itself).
class Stepper {
 public:
  Stepper(const AdamWCommandOptions& o, const optim::ParamGroup<optim::AdamWOptions>& group)
      : o_(o), local_grads_(group.grads) {
    if (o.zero) {
      // Clipping needs the averaged gradients' norm, which the sharded step never holds whole.
      if (o.clip_norm > 0 && distributed::world_size() > 1) {
        throw Error("adamw: --zero does not clip gradients (--clip-norm) across ranks");
      }
      sharded_ = std::make_unique<distributed::ShardedAdamW>(
          std::vector<optim::ParamGroup<optim::AdamWOptions>>{group});
    } else {
      plain_ = std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup<optim::AdamWOptions>>{group});
    }
    schedule_ = optim::make_schedule(o.schedule, o.warmup < 0 ? o.steps / 10 : o.warmup, o.steps);
  }

  std::vector<Tensor>& params() { return groups()[0].params; }
  std::vector<Tensor>& grads() { return groups()[0].grads; }
  const optim::AdamW* plain() const { return plain_.get(); }
  const distributed::ShardedAdamW* sharded() const { return sharded_.get(); }

  // Traces step `step` (from 0) and cuts it.
  void step(int64_t step) {
    std::vector<Tensor>& gradients = grads();
    if (distributed::world_size() > 1 && plain_) {
      gradients = local_grads_;
      distributed::all_reduce_coalesced(gradients, distributed::ReduceOp::mean);
    }
    const double lr = schedule_->lr(o_.lr, step);
    if (plain_) plain_->set_lr(lr);
    if (sharded_) sharded_->set_lr(lr);
    if (o_.clip_norm > 0) clip_grad_norm_(gradients, o_.clip_norm);
    if (plain_) plain_->step();
    if (sharded_) sharded_->step();
    mark_step();
  }

 private:
  std::vector<optim::ParamGroup<optim::AdamWOptions>>& groups() {
    return plain_ ? plain_->groups() : sharded_->groups();
  }

  const AdamWCommandOptions& o_;
  const std::vector<Tensor> local_grads_;
  std::unique_ptr<optim::AdamW> plain_;
  std::unique_ptr<distributed::ShardedAdamW> sharded_;
  std::unique_ptr<optim::Schedule> schedule_;
};

// Bytes a step reads and writes per parameter, and the optimizer state this rank holds.
void count_bytes(Stepper& stepper, optim::Precision precision, RunResult& r) {
  double step_bytes = 0;
  auto bytes = [](const Tensor& t) {
    return t.defined() ? static_cast<double>(t.numel() * dtype_size(t.dtype())) : 0.0;
  };
  const std::vector<Tensor>& params = stepper.params();
  const std::vector<Tensor>& grads = stepper.grads();
  for (size_t i = 0; i < params.size() && stepper.plain(); ++i) {
    const optim::AdamW::State& s = stepper.plain()->state(0, i);
    // Mixed precision writes the parameters without reading them (the masters are read).
    const double param_passes = precision == optim::Precision::mixed ? 1 : 2;
    step_bytes += param_passes * bytes(params[i]) + bytes(grads[i]);
    for (const Tensor* t : {&s.exp_avg, &s.exp_avg_sq, &s.max_exp_avg_sq, &s.master,
                            &s.exp_avg_absmax, &s.exp_avg_sq_absmax}) {
      step_bytes += 2 * bytes(*t);
      r.optimizer_state_bytes += static_cast<int64_t>(bytes(*t));
    }
  }
  r.bytes_per_param = step_bytes / static_cast<double>(r.params);
  if (stepper.sharded()) r.optimizer_state_bytes = stepper.sharded()->state_bytes();
}

// The measured steps: each step's device time (between events), trace time, transfers,
// compiles and ops, and the counters.
void time_steps(const AdamWCommandOptions& o, Stepper& stepper, RunResult& r) {
  metrics::reset();
  reset_peak_device_memory();
  if (!o.trace_path.empty()) {
    profiler::start();
    profiler::set_thread_name("host (tracing)");
  }
  const double host_wait_before = metrics::timer_stats("HostWaitTime").total_seconds;
  std::vector<DeviceEvent> events{record_event()};
  auto before = counters();
  for (int step = 1; step <= o.steps; ++step) {
    const auto start = Clock::now();
    {
      profiler::Scope span("trace step", "host");
      stepper.step(step - 1);
    }
    r.trace_seconds.push_back(seconds_since(start));
    events.push_back(record_event());
    auto now = counters();
    r.sync_transfers.push_back(delta(now, before, "TransferToDeviceSync"));
    r.compiles.push_back(delta(now, before, "UncachedCompile"));
    r.ops.push_back(delta(now, before, "TracedOps"));
    if (step == 1) {
      r.counters_after_first = now;
      // Step 1 ran on the interpreter while native kernels compiled in the background; the
      // measured steps that follow run native code.
      wait_kernel_compiles();
    }
    before = now;
    if (!o.quiet) {
      std::fprintf(stderr, "\r  %-8s step %d/%d", r.policy.c_str(), step, o.steps);
      std::fflush(stderr);
    }
  }
  r.host_wait_per_step =
      (metrics::timer_stats("HostWaitTime").total_seconds - host_wait_before) / o.steps;
  wait_device_ops();
  if (!o.quiet) std::fprintf(stderr, "\n");
  for (size_t k = 1; k < events.size(); ++k) {
    r.step_seconds.push_back(events[k].seconds_since(events[k - 1]));
  }
  r.counters_total = counters();
  for (auto& [name, value] : r.counters_after_first) value = r.counters_total[name] - value;
  r.peak_device_bytes = device_memory_stats().peak_bytes;
  if (!o.trace_path.empty()) {
    profiler::stop();
    profiler::write_chrome_trace(o.trace_path);
  }
}

// --dump: the starting parameters, the gradients and the final parameters, raw f32, with a
// manifest, for the PyTorch parity check.
void dump_run(const AdamWCommandOptions& o, const std::vector<models::ParameterSpec>& specs,
              const std::vector<std::vector<float>>& initial_params, Stepper& stepper) {
  namespace fs = std::filesystem;
  fs::create_directories(o.dump_dir);
  json manifest = {{"model", o.model},
                   {"steps", o.steps},
                   {"lr", o.lr},
                   {"beta1", 0.9},
                   {"beta2", 0.999},
                   {"eps", 1e-6},
                   {"weight_decay", o.weight_decay},
                   {"tensors", json::array()}};
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string stem = "t";
    stem += std::to_string(i);
    write_raw(fs::path(o.dump_dir) / (stem + ".param"), initial_params[i]);
    write_raw(fs::path(o.dump_dir) / (stem + ".grad"), stepper.grads()[i].to_vector());
    write_raw(fs::path(o.dump_dir) / (stem + ".param_after"), stepper.params()[i].to_vector());
    manifest["tensors"].push_back({{"name", specs[i].name},
                                   {"shape", specs[i].shape.to_vector()},
                                   {"param", stem + ".param"},
                                   {"grad", stem + ".grad"},
                                   {"param_after", stem + ".param_after"}});
  }
  std::ofstream(fs::path(o.dump_dir) / "manifest.json") << manifest.dump(2);
}

// Effective bandwidth against the roofline, measured in pairs: one step alone on the device,
// then one roofline pass over arrays of the same total size.
void measure_roofline(const AdamWCommandOptions& o, Stepper& stepper, RunResult& r) {
  const int64_t n = r.params;
  std::vector<float> rp(n, 1.0f), rg(n, 1e-3f), rm(n, 0.0f), rv(n, 0.0f);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  roofline_pass(rp.data(), rg.data(), rm.data(), rv.data(), n, threads);  // first touch
  std::vector<double> ratios, step_device, roof;
  for (int k = 0; k < o.roofline_steps; ++k) {
    const double exec_before = metrics::timer_stats("ExecuteTime").total_seconds;
    stepper.step(o.steps + k);
    wait_device_ops();
    const double device_seconds = metrics::timer_stats("ExecuteTime").total_seconds - exec_before;
    const double roof_seconds =
        roofline_pass(rp.data(), rg.data(), rm.data(), rv.data(), n, threads);
    step_device.push_back(device_seconds);
    roof.push_back(roof_seconds);
    // Bandwidths, not times: the roofline pass moves 28 bytes an element, a step of another
    // precision fewer.
    ratios.push_back(r.bytes_per_param / 28.0 * roof_seconds / device_seconds);
  }
  const double elements = static_cast<double>(n);
  r.roofline_gbs = 28.0 * elements / median(roof) / 1e9;
  r.effective_gbs = r.bytes_per_param * elements / median(step_device) / 1e9;
  r.roofline_fraction = median(ratios);
}

}  // namespace

RunResult run_adamw(const AdamWCommandOptions& o, ScalarPolicy policy,
                    const std::vector<models::ParameterSpec>& specs) {
  set_scalar_policy(policy);
  RunResult r;
  r.policy = scalar_policy_name(policy);
  r.tensors = static_cast<int64_t>(specs.size());
  r.params = models::parameter_count(specs);

  const optim::ParamGroup<optim::AdamWOptions> group = random_group(o, specs);
  mark_step();
  wait_device_ops();
  std::vector<std::vector<float>> initial_params;
  if (!o.dump_dir.empty()) {
    for (const Tensor& p : group.params) initial_params.push_back(p.to_vector());
  }
  Stepper stepper(o, group);
  count_bytes(stepper, group.options.precision, r);
  time_steps(o, stepper, r);
  if (!o.dump_dir.empty()) dump_run(o, specs, initial_params, stepper);
  if (o.roofline_steps > 0) measure_roofline(o, stepper, r);
  return r;
}

namespace {

json to_json(const AdamWCommandOptions& o, const RunResult& r) {
  std::vector<double> after_first(
      r.step_seconds.begin() + std::min<size_t>(1, r.step_seconds.size()), r.step_seconds.end());
  std::vector<double> trace_after_first(
      r.trace_seconds.begin() + std::min<size_t>(1, r.trace_seconds.size()), r.trace_seconds.end());
  return {{"model", o.model},
          {"device", lt::default_device().str()},
          {"params", r.params},
          {"tensors", r.tensors},
          {"steps", o.steps},
          {"scalar_policy", r.policy},
          {"precision", o.precision},
          {"bytes_per_param", o.zero ? json(nullptr) : json(r.bytes_per_param)},
          {"zero", o.zero},
          {"optimizer_state_bytes", r.optimizer_state_bytes},
          {"world_size", distributed::world_size()},
          {"schedule", o.schedule},
          {"clip_norm", o.clip_norm},
          {"kernel_compiler", kernel_compiler()},
          {"kernel_isa", kernel_isa()},
          {"step_seconds", r.step_seconds},
          {"step_seconds_median", median(after_first)},
          {"trace_seconds", r.trace_seconds},
          {"trace_seconds_median", median(trace_after_first)},
          {"ops_per_step", r.ops.empty() ? 0 : r.ops.back()},
          {"sync_transfers_per_step", r.sync_transfers},
          {"compiles_per_step", r.compiles},
          {"host_wait_seconds_per_step", r.host_wait_per_step},
          {"roofline_gbs", r.roofline_gbs},
          {"effective_gbs", r.effective_gbs},
          {"roofline_fraction", r.roofline_fraction},
          {"peak_device_bytes", r.peak_device_bytes},
          {"counters", r.counters_total},
          {"counters_after_first_step", r.counters_after_first}};
}

void print_steps(const RunResult& r) {
  std::printf("%6s %12s %12s %10s %10s %8s\n", "step", "step (ms)", "trace (ms)", "ops",
              "sync xfer", "compiles");
  for (size_t k = 0; k < r.step_seconds.size(); ++k) {
    std::printf("%6zu %12.2f %12.2f %10lld %10lld %8lld\n", k + 1, r.step_seconds[k] * 1e3,
                r.trace_seconds[k] * 1e3, static_cast<long long>(r.ops[k]),
                static_cast<long long>(r.sync_transfers[k]), static_cast<long long>(r.compiles[k]));
  }
}

}  // namespace

FreshKernelCache::FreshKernelCache() : previous_(kernel_cache_dir()) {
  char dir_template[] = "/tmp/lazytensor-kernels-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (!dir) throw Error("cannot create a temporary kernel cache folder");
  dir_ = dir;
  set_kernel_cache_dir(dir_);
}

FreshKernelCache::~FreshKernelCache() {
  set_kernel_cache_dir(previous_);
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::map<std::string, int64_t> counters() {
  std::map<std::string, int64_t> out;
  for (const auto& name : metrics::counter_names()) out[name] = metrics::counter_value(name);
  return out;
}

int64_t delta(const std::map<std::string, int64_t>& after,
              const std::map<std::string, int64_t>& before, const std::string& name) {
  auto a = after.find(name);
  auto b = before.find(name);
  return (a == after.end() ? 0 : a->second) - (b == before.end() ? 0 : b->second);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

int run_adamw_command(const AdamWCommandOptions& options) {
  // Under mpirun every rank steps (gradients averaged first); rank 0 alone prints and writes.
  AdamWCommandOptions o = options;
  if (!join_world_as_writer("adamw")) {
    o.quiet = true;
    o.json_path.clear();
    o.trace_path.clear();
    o.dump_dir.clear();
  }
  std::vector<ScalarPolicy> policies;
  std::unique_ptr<FreshKernelCache> fresh_cache;
  if (o.compare) {
    fresh_cache = std::make_unique<FreshKernelCache>();
    policies = {ScalarPolicy::uncached, ScalarPolicy::cached, ScalarPolicy::constant,
                ScalarPolicy::argument};
  } else {
    policies = {parse_scalar_policy(o.scalars)};
  }
  const auto specs = models::parameter_shapes(o.model);
  std::printf(
      "HF AdamW on %s: %zu tensors, %lld parameters, %d steps, schedule %s%s, precision %s, "
      "kernels: %s%s\n",
      o.model.c_str(), specs.size(), static_cast<long long>(models::parameter_count(specs)),
      o.steps, o.schedule.c_str(), o.clip_norm > 0 ? ", grad clipping" : "", o.precision.c_str(),
      kernel_compiler().c_str(),
      distributed::world_size() > 1
          ? (", " + std::to_string(distributed::world_size()) + " ranks (gradients averaged)")
                .c_str()
          : "");
  std::vector<RunResult> results;
  json runs = json::array();
  for (ScalarPolicy policy : policies) {
    results.push_back(run_adamw(o, policy, specs));
    runs.push_back(to_json(o, results.back()));
    if (!o.compare) {
      print_steps(results.back());
      std::printf("\n%s", metrics::report().c_str());
    }
  }
  std::printf("\n%-10s %12s %12s %12s %14s %12s %12s %10s\n", "policy", "step (ms)", "trace (ms)",
              "sync xfer/st", "compiles>st1", "wait (ms/st)", "eff. GB/s", "roofline");
  for (size_t i = 0; i < results.size(); ++i) {
    const json& j = runs[i];
    int64_t later_compiles = 0, later_sync = 0;
    for (size_t k = 1; k < results[i].compiles.size(); ++k) {
      later_compiles += results[i].compiles[k];
      later_sync += results[i].sync_transfers[k];
    }
    const double sync_per_step =
        results[i].compiles.size() > 1 ? double(later_sync) / (results[i].compiles.size() - 1) : 0;
    std::printf("%-10s %12.2f %12.2f %12.1f %14lld %12.2f %12.1f %9.2f\n",
                results[i].policy.c_str(), j["step_seconds_median"].get<double>() * 1e3,
                j["trace_seconds_median"].get<double>() * 1e3, sync_per_step,
                static_cast<long long>(later_compiles), results[i].host_wait_per_step * 1e3,
                results[i].effective_gbs, results[i].roofline_fraction);
  }
  if (o.zero) {
    std::printf("(ZeRO stage 1 over %d ranks: %.1f MiB of optimizer state on this rank)\n",
                distributed::world_size(), results.front().optimizer_state_bytes / 1048576.0);
  } else {
    std::printf(
        "(precision %s: %.2f bytes read and written per parameter a step; %.1f MiB of optimizer "
        "state)\n",
        o.precision.c_str(), results.front().bytes_per_param,
        results.front().optimizer_state_bytes / 1048576.0);
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << (o.compare ? json{{"runs", runs}} : runs[0]).dump(2);
    if (!out) throw Error("adamw --json: cannot write " + o.json_path);
  }
  distributed::finalize();
  return 0;
}

Command add_adamw_command(CLI::App& app) {
  auto options = std::make_shared<AdamWCommandOptions>();
  auto* adamw = app.add_subcommand("adamw", "HuggingFace AdamW steps over a model's parameters");
  adamw->add_option("--model", options->model, "tiny, bert-base or bert-large")
      ->capture_default_str();
  adamw->add_option("--steps", options->steps, "optimizer steps")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  adamw->add_option("--scalars", options->scalars, "argument, cached, uncached or constant")
      ->capture_default_str();
  adamw->add_option("--clip-norm", options->clip_norm, "clip gradients to this global norm");
  adamw->add_option("--schedule", options->schedule, "constant, linear or cosine")
      ->capture_default_str();
  adamw->add_option("--warmup", options->warmup, "warm-up steps (default: a tenth)");
  adamw->add_option("--lr", options->lr, "learning rate")->capture_default_str();
  adamw
      ->add_option("--precision", options->precision,
                   "fp32 (f32 parameters, gradients, moments); mixed (bf16 parameters and "
                   "gradients, f32 masters and moments); bf16 (everything bf16, stochastically "
                   "rounded); 8bit (bf16 parameters and gradients, block-wise 8-bit moments)")
      ->capture_default_str();
  adamw->add_option("--weight-decay", options->weight_decay, "weight decay")->capture_default_str();
  adamw
      ->add_option("--roofline-steps", options->roofline_steps,
                   "extra steps timed alone against the roofline kernel (0: skip)")
      ->capture_default_str();
  adamw->add_flag("--compare", options->compare,
                  "run the four scalar policies one after another, side by side");
  adamw->add_flag("--quiet", options->quiet, "no progress line");
  adamw->add_flag("--zero", options->zero,
                  "ZeRO stage 1: each rank keeps the optimizer state of 1/N of the parameters "
                  "(under mpirun -np N)");
  adamw->add_option("--json", options->json_path, "write the results as JSON");
  adamw->add_option("--trace", options->trace_path, "write a Chrome trace-event timeline");
  adamw->add_option("--dump", options->dump_dir,
                    "write starting parameters, gradients and final parameters (raw f32) here");
  return {adamw, [options] { return run_adamw_command(*options); }};
}

}  // namespace lt::tools
