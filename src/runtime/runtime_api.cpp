// The public functions of lazytensor/runtime.h.
#include <algorithm>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backend/registry.h"
#include "ir/node.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "runtime/backends.h"
#include "runtime/config.h"
#include "runtime/device.h"
#include "runtime/device_data.h"
#include "runtime/graph_executor.h"
#include "runtime/step_journal.h"
#include "runtime/trace_lock.h"

namespace lt {

void mark_step() {
  runtime::sync_pending();
}

void on_step_failure(std::function<void()> undo) {
  runtime::on_step_failure(std::move(undo));
}

void wait_device_ops() {
  // Every device finishes; the first failure found is reported after all have, as the kind of
  // error it was, with the failed step's host state put back.
  std::exception_ptr failure;
  for (backend::Backend* backend : backend::live_backends()) {
    try {
      backend->synchronize();
    } catch (const Error&) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) {
    runtime::settle_failed_step();
    std::rethrow_exception(failure);
  }
}

DeviceEvent record_event() {
  return runtime::backend_of(default_device()).record_event();
}

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
    case DeviceType::opencl:
      return "opencl";
  }
  return "unknown";
}

Device parse_device(const std::string& name) {
  const size_t colon = name.find(':');
  const std::string kind = name.substr(0, colon);
  Device device;
  bool known = false;
  for (DeviceType type : {DeviceType::cpu, DeviceType::cuda, DeviceType::opencl}) {
    if (kind == device_type_name(type)) {
      device.type = type;
      known = true;
    }
  }
  if (colon != std::string::npos) {
    const std::string index = name.substr(colon + 1);
    known = known && !index.empty() && index.size() <= 6 &&
            index.find_first_not_of("0123456789") == std::string::npos;
    if (known) device.index = std::stoi(index);
  }
  if (!known) {
    throw Error("device '" + name + "': expected cpu, cuda or opencl, optionally with ':index'");
  }
  return device;
}

std::vector<DeviceKind> device_kinds() {
  return backend::device_kinds();
}

std::string Device::str() const {
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

namespace {
// LT_DEVICE, read once: the default device of every thread that has not set its own, or why
// the name is not one (said at each use, as an lt::Error, until a thread sets a device).
struct ProcessDefault {
  Device device;
  std::string error;
};
const ProcessDefault& process_default() {
  static const ProcessDefault chosen = [] {
    const char* name = std::getenv("LT_DEVICE");
    if (name == nullptr || *name == '\0') return ProcessDefault{};
    try {
      return ProcessDefault{parse_device(name), ""};
    } catch (const Error& e) {
      return ProcessDefault{Device{}, std::string("LT_DEVICE: ") + e.what()};
    }
  }();
  return chosen;
}
thread_local std::optional<Device> t_default_device;  // set by set_default_device
}  // namespace

Device default_device() {
  if (t_default_device) return *t_default_device;
  const ProcessDefault& chosen = process_default();
  if (!chosen.error.empty()) throw Error(chosen.error);
  return chosen.device;
}

void set_default_device(const Device& device) {
  runtime::backend_of(device);  // an unknown or unavailable device fails here, not at an op
  t_default_device = device;
}

void set_default_device(const std::string& name) {
  set_default_device(parse_device(name));
}

void DeviceEvent::wait() const {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
}

bool DeviceEvent::done() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

double DeviceEvent::completion_seconds() const {
  wait();
  std::lock_guard<std::mutex> lock(state_->mu);
  return std::chrono::duration<double>(state_->time.time_since_epoch()).count();
}

double DeviceEvent::seconds_since(const DeviceEvent& earlier) const {
  return completion_seconds() - earlier.completion_seconds();
}

const char* scalar_policy_name(ScalarPolicy policy) {
  switch (policy) {
    case ScalarPolicy::argument:
      return "argument";
    case ScalarPolicy::cached:
      return "cached";
    case ScalarPolicy::uncached:
      return "uncached";
    case ScalarPolicy::constant:
      return "constant";
  }
  return "unknown";
}

ScalarPolicy parse_scalar_policy(const std::string& name) {
  for (ScalarPolicy p : {ScalarPolicy::argument, ScalarPolicy::cached, ScalarPolicy::uncached,
                         ScalarPolicy::constant}) {
    if (name == scalar_policy_name(p)) return p;
  }
  throw Error("parse_scalar_policy: unknown scalar policy '" + name +
              "' (expected argument, cached, uncached or constant)");
}

void set_front_end(const std::string& language) {
  if (language != "c++" && language != "python") {
    throw Error("set_front_end: expected \"c++\" or \"python\", got \"" + language + "\"");
  }
  runtime::config().python_front_end = language == "python";
}
std::string front_end() {
  return runtime::config().python_front_end ? "python" : "c++";
}

void set_scalar_policy(ScalarPolicy policy) {
  runtime::config().scalar_policy = policy;
}
ScalarPolicy scalar_policy() {
  return runtime::config().scalar_policy;
}
void set_special_scalars(bool enabled) {
  runtime::config().special_scalars = enabled;
}
bool special_scalars() {
  return runtime::config().special_scalars;
}
void set_compile_cache_size(size_t graphs) {
  runtime::config().compile_cache_size = graphs;
}
size_t compile_cache_size() {
  return runtime::config().compile_cache_size;
}
void set_data_cache_size(size_t entries) {
  runtime::config().data_cache_size = entries;
}
void set_num_threads(int threads) {
  if (threads < 1) {
    throw Error("set_num_threads: expected a positive number of threads, got " +
                std::to_string(threads));
  }
  runtime::config().num_threads = threads;
}
int get_num_threads() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = runtime::config().num_threads;
  return threads > 0 ? threads : cores;
}
size_t data_cache_size() {
  return runtime::config().data_cache_size;
}
void set_kernel_compiler(const std::string& name) {
  runtime::config().set_kernel_compiler(name);
}
std::string kernel_compiler() {
  return runtime::config().kernel_compiler();
}

std::string matmul_library(DType dtype) {
  const std::string name = runtime::backend_of(default_device()).matmul_library(dtype);
  if (dtype == DType::bf16 && !name.starts_with("oneDNN")) {
    return name + " (bf16 operands widened to f32)";
  }
  return name;
}
std::string matmul_isa(DType dtype) {
  return runtime::backend_of(default_device()).matmul_isa(dtype);
}
std::string kernel_isa() {
  return runtime::backend_of(default_device()).kernel_isa();
}
void set_tiered_compilation(bool enabled) {
  runtime::config().tiered_compilation = enabled;
}
bool tiered_compilation() {
  return runtime::config().tiered_compilation;
}
void wait_kernel_compiles() {
  for (backend::Backend* backend : backend::live_backends()) backend->wait_compiles();
}
void set_symbolic_sizes(bool enabled) {
  runtime::config().symbolic_sizes = enabled;
}
bool symbolic_sizes() {
  return runtime::config().symbolic_sizes;
}
void set_row_groups(bool enabled) {
  runtime::config().row_groups = enabled;
}
bool row_groups() {
  return runtime::config().row_groups;
}

void set_max_kernel_ops(size_t ops) {
  if (ops == 0) throw Error("set_max_kernel_ops: a kernel needs at least one op");
  runtime::config().max_kernel_ops = ops;
}
void set_graph_warn_nodes(size_t nodes) {
  runtime::config().graph_warn_nodes = nodes;
  runtime::rearm_graph_growth_warning();
  runtime::rearm_rerunning_reads_warning();
}
void set_auto_cut_nodes(size_t nodes) {
  runtime::config().auto_cut_nodes = nodes;
}
int64_t live_ir_nodes() {
  return ir::live_nodes();
}
void set_kernel_cache_dir(const std::string& path) {
  runtime::config().set_kernel_cache_dir(path);
}
std::string kernel_cache_dir() {
  return runtime::config().kernel_cache_dir();
}
void set_kernel_cache_bytes(size_t bytes) {
  runtime::config().kernel_cache_bytes = bytes;
}
void set_device_memory_limit(size_t bytes) {
  runtime::config().device_memory_limit = bytes;
  const backend::BackendSettings settings = runtime::backend_settings();
  for (backend::Backend* backend : backend::live_backends()) backend->update_settings(settings);
}
void set_debug(bool enabled) {
  runtime::config().debug = enabled;
}
bool debug() {
  return runtime::config().debug;
}

std::string last_recompile_reason() {
  return runtime::last_recompile_reason();
}
std::vector<int64_t> compiles_per_step() {
  return runtime::compiles_per_step();
}
StepStats last_step_stats() {
  return runtime::last_step_stats();
}
size_t compile_cache_entries() {
  return runtime::compile_cache_entries();
}
void clear_compile_caches() {
  wait_kernel_compiles();
  runtime::clear_compile_cache();
  for (backend::Backend* backend : backend::live_backends()) backend->clear_kernel_cache();
}
size_t kernel_cache_entries() {
  return runtime::backend_of(default_device()).kernel_cache_entries();
}

DeviceMemoryStats device_memory_stats() {
  return runtime::backend_of(default_device()).memory_stats();
}
void reset_peak_device_memory() {
  runtime::backend_of(default_device()).reset_peak_memory();
}

}  // namespace lt
