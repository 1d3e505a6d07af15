// Generated kernel source -> system C++ compiler -> shared object -> dlopen, as MLX and
// PyTorch Inductor do on the CPU. Shared objects are cached on disk by a hash of the source
// and the compiler command, so a second process starts warm.
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/kernel_disk_cache.h"
#include "lazytensor/error.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cpu {

namespace fs = std::filesystem;

namespace {

// -fno-math-errno lets sqrt vectorize (4x on AdamW); -march=native uses the host's vector
// width. No -ffast-math: results must match the reference. -ffp-contract=off: no fused
// multiply-adds the interpreter does not make either, so a kernel gives the same bits whichever
// of the two runs it (tiered compilation switches mid-run, and a resumed training run must
// reach the bits of an uninterrupted one). -fno-trapping-math: no kernel reads the
// floating-point exception flags, and without it the vectorizer will not compute both arms of
// a select when one holds arithmetic (the 8-bit maps' selects kept their loops scalar); it
// changes no value. -fwrapv: integer ops wrap on overflow, as PyTorch's do (and the
// interpreter's, built with the same flag).
constexpr const char* kFlags =
    "-std=c++17 -O3 -march=native -fno-math-errno -fno-trapping-math -ffp-contract=off -fwrapv "
    "-fPIC -shared -w"
#if defined(__x86_64__)
    // All of an AVX-512 host's width: GCC's tuning for recent Intel cores stops at 256 bits (a
    // BERT-base bf16 step's elementwise kernels took 251 ms instead of 180, its GELUs twice as
    // long). Without AVX-512 it changes nothing.
    " -mprefer-vector-width=512"
#endif
    ;

struct SharedObject {
  void* handle = nullptr;
  ~SharedObject() {
    if (handle) dlclose(handle);
  }
};

class NativeKernel final : public CompiledKernel {
 public:
  using Fn = void (*)(const void* const*, void* const*, const double*, long, long);
  NativeKernel(Fn fn, std::shared_ptr<SharedObject> object) : fn_(fn), object_(std::move(object)) {}
  void run(const void* const* inputs, void* const* outputs, const double* scalars, int64_t start,
           int64_t n) const override {
    fn_(inputs, outputs, scalars, static_cast<long>(start), static_cast<long>(n));
  }
  const char* method() const override { return "native"; }

 private:
  Fn fn_;
  std::shared_ptr<SharedObject> object_;  // keeps the code loaded
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// The 8-bit AdamW step of BERT-base (`lazytensor adamw --precision 8bit`), its kernels built
// both ways: on a Zen 5, which gathers 16 lanes in about 16 cycles and permutes two registers'
// bytes in one or two, decoding by permutes took the step from 96 to 83 ms; on an Intel Xeon
// with AMX, where such a permute is three uops (two on one port) and gathers are faster, the
// step took 135-136 ms with the decode against 119-121 without.
bool byte_permutes_beat_gathers() {
#if defined(__x86_64__)
  return __builtin_cpu_is("amd");
#else
  return false;
#endif
}

// BERT-base's AdamW step (`lazytensor adamw --model bert-base`), the kernels built with and
// without the prefetches of kernel_prelude.h's lt_prefetch_block: on an Intel Xeon the bf16
// state's step took 44 ms with them against 80 (fp32 and mixed 4-9% faster, 8-bit 2% slower);
// on a Zen 4, medians of five pairs on one thread, fp32 86 against 75 ms and mixed 106 against
// 75 (bf16 81 against 79), and training steps no faster with them. The Zen 4 is the one AMD CPU
// measured both ways; other CPUs keep them.
bool software_prefetch_helps() {
#if defined(__x86_64__)
  return !__builtin_cpu_is("amd");
#else
  return true;
#endif
}

std::vector<std::shared_ptr<CompiledKernel>> compile_native(
    const std::vector<const KernelProgram*>& programs, const KernelSettings& options) {
  std::vector<std::string> symbols;
  for (const KernelProgram* program : programs) {
    char name[40];
    std::snprintf(name, sizeof name, "lt_kernel_%016llx",
                  static_cast<unsigned long long>(compiler::hash_string(program->key())));
    symbols.push_back(name);
  }
  const std::string source = generate_source(programs, symbols);
  std::string command = options.compiler + " " + kFlags;
  if (options.decode_codes_by_permutes) command += " -DLT_DECODE_BY_PERMUTES";
  if (options.software_prefetch) command += " -DLT_SOFTWARE_PREFETCH";
  char stem[40];
  std::snprintf(stem, sizeof stem, "lt_%016llx",
                static_cast<unsigned long long>(compiler::hash_string(command + "\n" + source)));

  const fs::path dir = options.cache_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path so_path = dir / (std::string(stem) + ".so");
  // Compiles run in parallel; finding, storing, loading and trimming files do not, so that
  // one compile's trim never removes a file another is about to load.
  static std::mutex disk_mu;
  std::unique_lock<std::mutex> disk(disk_mu);
  if (fs::exists(so_path)) {
    metrics::counter("KernelDiskCacheHit").add();
    mark_recently_used(so_path);
  } else {
    // Unique temporaries, renamed into place, so concurrent processes never see half a file.
    static std::atomic<uint64_t> compiles{0};  // several compiles run at once
    const std::string unique =
        std::to_string(getpid()) + "." + std::to_string(compiles.fetch_add(1));
    const fs::path src_path = dir / (std::string(stem) + "." + unique + ".cpp");
    const fs::path tmp_path = dir / (std::string(stem) + "." + unique + ".tmp");
    const fs::path log_path = dir / (std::string(stem) + "." + unique + ".log");
    {
      std::ofstream out(src_path);
      out << source;
      if (!out) throw Error("kernel compiler: cannot write " + src_path.string());
    }
    const std::string cmd = command + " -o '" + tmp_path.string() + "' '" + src_path.string() +
                            "' > '" + log_path.string() + "' 2>&1";
    disk.unlock();
    const int status = std::system(cmd.c_str());
    disk.lock();
    const std::string log = read_file(log_path);
    fs::remove(src_path, ec);
    fs::remove(log_path, ec);
    if (status != 0) {
      fs::remove(tmp_path, ec);
      throw Error("kernel compiler: '" + command + "' failed (status " + std::to_string(status) +
                  "): " + log.substr(0, 2000));
    }
    fs::rename(tmp_path, so_path, ec);
    if (ec) throw Error("kernel compiler: cannot store " + so_path.string() + ": " + ec.message());
    metrics::counter("KernelCompile").add(static_cast<int64_t>(programs.size()));
  }

  auto object = std::make_shared<SharedObject>();
  object->handle = dlopen(so_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!object->handle) {
    throw Error(std::string("kernel compiler: cannot load ") + so_path.string() + ": " + dlerror());
  }
  // Trimmed only once loaded: the new file may go, its code stays mapped.
  trim_disk_cache(dir, ".so", options.cache_bytes);
  std::vector<std::shared_ptr<CompiledKernel>> kernels;
  for (const std::string& symbol : symbols) {
    auto fn = reinterpret_cast<NativeKernel::Fn>(dlsym(object->handle, symbol.c_str()));
    if (!fn) throw Error("kernel compiler: symbol " + symbol + " missing in " + so_path.string());
    kernels.push_back(std::make_shared<NativeKernel>(fn, object));
  }
  return kernels;
}

}  // namespace lt::backend::cpu
