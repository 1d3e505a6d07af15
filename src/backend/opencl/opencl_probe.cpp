// Whether this machine can run the OpenCL device kind: the ICD loader and a platform with a
// device (PoCL on a CPU, a GPU's driver). Read through the loader opened with dlopen, so the
// engine builds and loads where OpenCL is absent. The few OpenCL 1.2 entry points and constants
// used are declared here (they are the ABI the loader exports).
#include <dlfcn.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/registry.h"

namespace lt::backend::opencl {

namespace {

using ClInt = int32_t;
using ClUint = uint32_t;
using PlatformId = void*;
using DeviceId = void*;
constexpr ClUint kPlatformName = 0x0902;         // CL_PLATFORM_NAME
constexpr uint64_t kDeviceTypeAll = 0xFFFFFFFF;  // CL_DEVICE_TYPE_ALL
constexpr ClInt kDeviceNotFound = -1;            // CL_DEVICE_NOT_FOUND
using GetPlatformIds = ClInt (*)(ClUint, PlatformId*, ClUint*);
using GetPlatformInfo = ClInt (*)(PlatformId, ClUint, size_t, void*, size_t*);
using GetDeviceIds = ClInt (*)(PlatformId, uint64_t, ClUint, DeviceId*, ClUint*);

Availability probe() {
  void* loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (loader == nullptr) return {false, std::string("no OpenCL ICD loader (") + dlerror() + ")"};
  const auto platform_ids = reinterpret_cast<GetPlatformIds>(dlsym(loader, "clGetPlatformIDs"));
  const auto platform_info = reinterpret_cast<GetPlatformInfo>(dlsym(loader, "clGetPlatformInfo"));
  const auto device_ids = reinterpret_cast<GetDeviceIds>(dlsym(loader, "clGetDeviceIDs"));
  if (platform_ids == nullptr || platform_info == nullptr || device_ids == nullptr) {
    return {false, "libOpenCL.so.1 lacks the OpenCL 1.2 platform calls"};
  }
  ClUint count = 0;
  // The loader answers an error (-1001, no platform) where no ICD is installed.
  if (platform_ids(0, nullptr, &count) != 0 || count == 0) {
    return {false, "no OpenCL platform (an ICD such as Debian's pocl-opencl-icd is not installed)"};
  }
  std::vector<PlatformId> platforms(count);
  if (platform_ids(count, platforms.data(), nullptr) != 0) {
    return {false, "the OpenCL loader did not list its platforms"};
  }
  std::string found;
  ClUint devices = 0;
  for (PlatformId platform : platforms) {
    char name[256] = {};
    platform_info(platform, kPlatformName, sizeof name - 1, name, nullptr);
    ClUint n = 0;
    const ClInt status = device_ids(platform, kDeviceTypeAll, 0, nullptr, &n);
    if (status != 0 && status != kDeviceNotFound) n = 0;
    devices += n;
    found += (found.empty() ? "" : ", ") + std::string(name) + " (" + std::to_string(n) +
             (n == 1 ? " device)" : " devices)");
  }
  if (devices == 0) return {false, "no OpenCL device on the platforms " + found};
  return {true, "OpenCL platform " + found};
}

}  // namespace

void register_backend() {
  register_device_probe(DeviceType::opencl, probe);
}

}  // namespace lt::backend::opencl
