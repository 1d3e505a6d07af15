// Whether this machine can run the CUDA device kind: the driver library and a GPU. Read through
// the driver API opened with dlopen, so a machine without a driver reports why instead of
// failing to load the engine (the toolkit's stub libcuda.so is never on the runtime path).
#include <dlfcn.h>

#include <string>

#include "backend/cuda/cuda_source.h"
#include "backend/registry.h"
#include "lazytensor/error.h"

namespace lt::backend::cuda {

namespace {

Availability probe() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return {false, std::string("no CUDA driver (") + dlerror() + ")"};
  // Kept loaded: cuInit may start threads of the driver's that must not lose their code.
  using Init = int (*)(unsigned int);
  using DeviceCount = int (*)(int*);
  const auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
  const auto device_count = reinterpret_cast<DeviceCount>(dlsym(driver, "cuDeviceGetCount"));
  if (init == nullptr || device_count == nullptr) {
    return {false, "libcuda.so.1 lacks cuInit or cuDeviceGetCount"};
  }
  if (const int status = init(0); status != 0) {
    return {false,
            "the CUDA driver did not start (cuInit returned " + std::to_string(status) + ")"};
  }
  int count = 0;
  if (const int status = device_count(&count); status != 0 || count == 0) {
    return {false, "the CUDA driver sees no GPU"};
  }
  return {true, std::to_string(count) + (count == 1 ? " GPU" : " GPUs") + " under the CUDA driver"};
}

// lt::check_codegen for cuda: NVRTC compiles the programs' CUDA source.
CodegenCheck check(const std::vector<const compiler::KernelProgram*>& programs,
                   const std::vector<std::string>& names, const std::string& arch) {
  std::string why;
  const std::optional<Nvrtc> nvrtc = Nvrtc::open(&why);
  if (!nvrtc) throw Error("check_codegen: cuda: " + why);
  const CompileReport report = nvrtc->compile(generate_source(programs, names), arch);
  CodegenCheck out;
  out.device = "cuda";
  out.arch = arch;
  out.compiler = "NVRTC " + nvrtc->version();
  out.compiled = report.compiled;
  out.log = report.log;
  for (const std::string& name : names) {
    KernelCompileCheck kernel;
    kernel.name = name;
    for (const KernelReport& compiled : report.kernels) {
      if (compiled.name != name) continue;
      kernel.compiled = report.compiled && compiled.reported;
      kernel.registers = compiled.registers;
      kernel.stack_bytes = compiled.stack_bytes;
      kernel.spill_bytes = compiled.spill_bytes;
    }
    out.kernels.push_back(kernel);
  }
  return out;
}

}  // namespace

void register_backend() {
  register_device_probe(DeviceType::cuda, probe);
  register_codegen_checker(DeviceType::cuda, check);
}

}  // namespace lt::backend::cuda
