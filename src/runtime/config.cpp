#include "runtime/config.h"

#include <cstdlib>
#include <string>

#include "lazytensor/error.h"

namespace lt::runtime {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? value : nullptr;
}

size_t env_size(const char* name, size_t fallback) {
  const char* value = env(name);
  if (!value) return fallback;
  char* end = nullptr;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  if (*end != '\0') throw Error(std::string(name) + ": expected a number, got '" + value + "'");
  return static_cast<size_t>(parsed);
}

bool env_flag(const char* name, bool fallback) {
  const char* value = env(name);
  if (!value) return fallback;
  std::string s(value);
  return !(s == "0" || s == "false" || s == "off" || s == "no");
}

std::string default_cache_dir() {
  if (const char* dir = env("XDG_CACHE_HOME")) return std::string(dir) + "/lazytensor/kernels";
  if (const char* home = env("HOME")) return std::string(home) + "/.cache/lazytensor/kernels";
  return "/tmp/lazytensor-kernels";
}

}  // namespace

Config& config() {
  static Config* instance = [] {
    auto* c = new Config();  // never destroyed: the device worker may read it at exit
    if (const char* policy = env("LT_SCALAR_POLICY"))
      c->scalar_policy = parse_scalar_policy(policy);
    c->special_scalars = env_flag("LT_SPECIAL_SCALARS", true);
    c->compile_cache_size = env_size("LT_COMPILE_CACHE_SIZE", 256);
    c->data_cache_size = env_size("LT_DATA_CACHE_SIZE", 128);
    c->kernel_cache_size = env_size("LT_KERNEL_CACHE_SIZE", 4096);
    c->kernel_cache_bytes = env_size("LT_KERNEL_CACHE_BYTES", size_t{256} << 20);
    c->debug = env_flag("LT_DEBUG", false);
    c->device_memory_limit = env_size("LT_DEVICE_MEMORY_LIMIT", 0);
    c->num_threads = static_cast<int>(env_size("LT_NUM_THREADS", 0));
    c->tiered_compilation = env_flag("LT_TIERED_COMPILE", true);
    c->max_kernel_ops = env_size("LT_MAX_KERNEL_OPS", 512);
    c->row_groups = env_flag("LT_ROW_GROUPS", true);
    c->symbolic_sizes = env_flag("LT_SYMBOLIC_SIZES", true);
    if (c->max_kernel_ops == 0) throw Error("LT_MAX_KERNEL_OPS: a kernel needs at least one op");
    c->graph_warn_nodes = env_size("LT_GRAPH_WARN_NODES", 1'000'000);
    c->auto_cut_nodes = env_size("LT_AUTO_CUT_NODES", 4'000'000);
    if (const char* compiler = env("LT_COMPILER")) c->set_kernel_compiler(compiler);
    const char* dir = env("LT_KERNEL_CACHE_DIR");
    c->kernel_cache_dir_ = dir ? dir : default_cache_dir();
    return c;
  }();
  return *instance;
}

std::string Config::kernel_compiler() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kernel_compiler_;
}

void Config::set_kernel_compiler(const std::string& name) {
  if (name != "native" && name != "interpreter") {
    throw Error("set_kernel_compiler: unknown kernel compiler '" + name +
                "' (expected native or interpreter)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  kernel_compiler_ = name;
}

void Config::set_kernel_cache_dir(const std::string& path) {
  if (path.empty()) throw Error("set_kernel_cache_dir: the path is empty");
  std::lock_guard<std::mutex> lock(mu_);
  kernel_cache_dir_ = path;
}

std::string Config::kernel_cache_dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return kernel_cache_dir_;
}

}  // namespace lt::runtime
