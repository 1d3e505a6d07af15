// The CUDA device kind in the registry: its backend (the offload backend over the driver API
// and NVRTC), whether this machine can run it (a driver, a GPU, NVRTC), and lt::check_codegen's
// NVRTC compile of a step's kernels for any architecture, without a GPU. The driver is opened
// with dlopen: a machine without one reports why instead of failing to load the engine (the
// toolkit's stub libcuda.so is never on the runtime path).
#include <memory>
#include <optional>
#include <string>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_source.h"
#include "backend/offload/offload_backend.h"
#include "backend/offload/routines.h"
#include "backend/registry.h"
#include "lazytensor/error.h"

namespace lt::backend::cuda {

namespace {

Availability probe() {
  std::string why;
  const std::optional<Driver> driver = Driver::open(&why);
  if (!driver) return {false, why};
  if (const CuResult r = driver->init(0); r != kCuSuccess) {
    return {false, "the CUDA driver did not start (" + driver->describe("cuInit", r) + ")"};
  }
  int count = 0;
  if (driver->device_count(&count) != kCuSuccess || count == 0) {
    return {false, "the CUDA driver sees no GPU"};
  }
  if (!Nvrtc::open(&why)) return {false, why + ": the CUDA driver's kernels cannot be compiled"};
  return {true, std::to_string(count) + (count == 1 ? " GPU" : " GPUs") + " under the CUDA driver"};
}

std::unique_ptr<Backend> make_backend(int index, const BackendSettings& settings) {
  const std::string device = "cuda:" + std::to_string(index);
  std::string why;
  const std::optional<Driver> driver = Driver::open(&why);
  if (!driver) throw Error(device + ": " + why);
  std::optional<Nvrtc> nvrtc = Nvrtc::open(&why);
  if (!nvrtc) throw Error(device + ": " + why);
  // Without cuBLASLt, products run as the generated tiled kernel (matmul_library says which).
  std::string no_blas;
  std::shared_ptr<Device> opened =
      Device::open(*driver, std::make_shared<Nvrtc>(std::move(*nvrtc)), BlasLt::open(&no_blas),
                   index, settings.kernels.cache_dir, settings.kernels.cache_bytes, &why);
  if (opened == nullptr) throw Error(device + ": " + why);
  return offload::make_backend(std::move(opened), index, settings);
}

// lt::check_codegen for cuda: NVRTC compiles the programs' CUDA source.
CodegenCheck check(const std::vector<const compiler::KernelProgram*>& programs,
                   const std::vector<std::string>& names, const std::string& arch) {
  std::string why;
  const std::optional<Nvrtc> nvrtc = Nvrtc::open(&why);
  if (!nvrtc) throw Error("check_codegen: cuda: " + why);
  // The step's kernels and every routine the device has: a step's folds, products, gathers and
  // copies are routines, generated per dtype.
  offload::Routines routines(KernelDialect::cuda);
  std::vector<std::string> all = names;
  for (std::string& name : routines.add_every_routine()) all.push_back(std::move(name));
  const CompileReport report =
      nvrtc->compile(generate_source(programs, names) + routines.source(), arch);
  CodegenCheck out;
  out.device = "cuda";
  out.arch = arch;
  out.compiler = nvrtc->version();
  out.compiled = report.compiled;
  out.log = report.log;
  for (const std::string& name : all) {
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
  backend::register_backend(DeviceType::cuda, make_backend);
  register_device_probe(DeviceType::cuda, probe);
  register_codegen_checker(DeviceType::cuda, check);
}

}  // namespace lt::backend::cuda
