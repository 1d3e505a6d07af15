// The OpenCL device kind in the registry: its backend, whether this machine can run it (the ICD
// loader and a platform with a device: PoCL on a CPU, a GPU's driver), and lt::check_codegen's
// build of a step's kernels as OpenCL C. The probe finds the device without opening it: a context
// would start the platform's threads in every process that lists its devices.
#include <optional>
#include <string>

#include "backend/offload/offload_backend.h"
#include "backend/offload/routines.h"
#include "backend/opencl/opencl_api.h"
#include "backend/opencl/opencl_source.h"
#include "backend/registry.h"
#include "lazytensor/error.h"

namespace lt::backend::opencl {

namespace {

Availability probe() {
  std::string why;
  const std::optional<Api> api = Api::open(&why);
  if (!api) return {false, why};
  const std::optional<FoundDevice> found = find_device(*api, &why);
  if (!found) return {false, why};
  return {true, "OpenCL " + found->description};
}

// The programs as one OpenCL C source, built for the device; each kernel is then taken from the
// built program. OpenCL reports no registers or spills, and builds for the device it has, so
// the architecture asked for is not used: the device's name is reported.
CodegenCheck check(const std::vector<const compiler::KernelProgram*>& programs,
                   const std::vector<std::string>& names, const std::string& /*arch*/) {
  std::string why;
  const std::shared_ptr<Device> device = Device::open(&why);
  if (device == nullptr) throw Error("check_codegen: opencl: " + why);
  CodegenCheck out;
  out.device = "opencl";
  out.arch = device->name();
  out.compiler = device->description();
  // The step's kernels and every routine the device has (folds, products, gathers, copies).
  offload::Routines routines(KernelDialect::opencl);
  std::vector<std::string> all = names;
  for (std::string& name : routines.add_every_routine()) all.push_back(std::move(name));
  std::shared_ptr<void> program;
  try {
    program =
        device->build_source(generate_source(programs, names) + routines.source(), build_options());
    out.compiled = true;
  } catch (const Error& e) {
    out.log = e.what();
  }
  for (const std::string& name : all) {
    KernelCompileCheck kernel;
    kernel.name = name;
    if (program != nullptr) {
      try {
        device->kernel(program, name);
        kernel.compiled = true;
      } catch (const Error& e) {
        out.log += name + ": " + e.what() + "\n";
      }
    }
    out.kernels.push_back(kernel);
  }
  return out;
}

// The backend of opencl:0, the one device served.
std::unique_ptr<Backend> make_backend(int index, const BackendSettings& settings) {
  if (index != 0) {
    throw Error("opencl:" + std::to_string(index) + ": the opencl backend serves one device, " +
                "opencl:0");
  }
  std::string why;
  std::shared_ptr<Device> device = Device::open(&why);
  if (device == nullptr) throw Error("opencl:0: " + why);
  return offload::make_backend(std::move(device), index, settings);
}

}  // namespace

void register_backend() {
  backend::register_backend(DeviceType::opencl, make_backend);
  register_device_probe(DeviceType::opencl, probe);
  register_codegen_checker(DeviceType::opencl, check);
}

}  // namespace lt::backend::opencl
