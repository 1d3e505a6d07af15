#pragma once
// The CUDA target of the kernel renderer, checked without a GPU: CUDA C++ for the fused kernel
// programs, and NVRTC (opened with dlopen, so nothing needs the toolkit to build or run) to
// compile it to a CUBIN and report each kernel's registers, stack and spills.
#include <optional>
#include <string>
#include <vector>

#include "compiler/kernel_program.h"

namespace lt::backend::cuda {

// A shim that maps the GCC builtins of the CPU's kernel prelude onto CUDA's device functions,
// that prelude (so the same expressions as every other target), then each program as a
// __global__ function named by `symbols` (backend/kernel_source.h's CUDA dialect).
std::string generate_source(const std::vector<const compiler::KernelProgram*>& programs,
                            const std::vector<std::string>& symbols);

struct KernelReport {
  std::string name;
  bool reported = false;  // ptxas reported its registers and its frame
  int registers = 0;
  int stack_bytes = 0;
  int spill_bytes = 0;  // spill stores and loads
};

struct CompileReport {
  bool compiled = false;
  std::string log;  // NVRTC's log: errors, and ptxas's report
  std::vector<KernelReport> kernels;
};

// What the CUDA device compiles its programs with: NVRTC, or a test's compiler for a fake
// driver that runs kernels on the host.
class KernelCompiler {
 public:
  virtual ~KernelCompiler() = default;
  // "NVRTC 13.0".
  virtual std::string version() const = 0;
  // What decides an image besides the source and the architecture: the version and the
  // options (the disk cache's key).
  virtual std::string cache_key() const { return version(); }
  // `source` as an image the driver loads (cuModuleLoadData) for `arch` ("sm_90"); throws
  // lt::Error with the compiler's log when it does not compile.
  virtual std::string image(const std::string& source, const std::string& arch) const = 0;
  // Whether an image stays valid in another process, so that it may be kept on disk.
  virtual bool images_outlive_the_process() const { return true; }
};

class Nvrtc final : public KernelCompiler {
 public:
  // The NVRTC library of the CUDA toolkit with every call used here, or nullopt with `why` it
  // is not there.
  static std::optional<Nvrtc> open(std::string* why);
  std::string version() const override;
  std::string cache_key() const override;
  // `source` to a CUBIN for `arch` ("sm_90"), with ptxas's per-kernel report. Multiply-adds
  // are not contracted (-fmad=false), as on the CPU (-ffp-contract=off): every target rounds
  // the same operations.
  CompileReport compile(const std::string& source, const std::string& arch) const;
  // The CUBIN.
  std::string image(const std::string& source, const std::string& arch) const override;

 private:
  CompileReport compile(const std::string& source, const std::string& arch,
                        std::string* cubin) const;
  // NVRTC's C API, the calls used (nvrtc.h's types: a program is a pointer, results ints).
  using Program = void*;
  int (*create_)(Program*, const char*, const char*, int, const char* const*,
                 const char* const*) = nullptr;
  int (*compile_)(Program, int, const char* const*) = nullptr;
  int (*log_size_)(Program, size_t*) = nullptr;
  int (*log_)(Program, char*) = nullptr;
  int (*cubin_size_)(Program, size_t*) = nullptr;
  int (*cubin_)(Program, char*) = nullptr;
  int (*destroy_)(Program*) = nullptr;
  int (*version_)(int*, int*) = nullptr;
};

}  // namespace lt::backend::cuda
