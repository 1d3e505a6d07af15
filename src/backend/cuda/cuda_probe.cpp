// Whether this machine can run the CUDA device kind: the driver library and a GPU. Read through
// the driver API opened with dlopen, so a machine without a driver reports why instead of
// failing to load the engine (the toolkit's stub libcuda.so is never on the runtime path).
#include <dlfcn.h>

#include <string>

#include "backend/registry.h"

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

}  // namespace

void register_backend() {
  register_device_probe(DeviceType::cuda, probe);
}

}  // namespace lt::backend::cuda
