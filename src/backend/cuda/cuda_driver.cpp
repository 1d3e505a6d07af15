#include "backend/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <string>

#include "backend/dynamic_symbol.h"
#include "lazytensor/error.h"

namespace lt::backend::cuda {

std::optional<Driver> Driver::open(std::string* why) {
  // Opened once and kept for the process: cuInit starts driver threads that must keep their
  // code.
  static void* const library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    *why = "no CUDA driver (libcuda.so.1 is not installed)";
    return std::nullopt;
  }
  Driver d;
  // The _v2 entry points are the ones cuda.h names by its macros since CUDA 3.2 and 11.0.
  const bool complete =
      resolve(library, "cuInit", d.init) &&
      resolve(library, "cuDriverGetVersion", d.driver_version) &&
      resolve(library, "cuDeviceGetCount", d.device_count) &&
      resolve(library, "cuDeviceGet", d.device_get) &&
      resolve(library, "cuDeviceGetName", d.device_name) &&
      resolve(library, "cuDeviceGetAttribute", d.device_attribute) &&
      resolve(library, "cuDeviceTotalMem_v2", d.device_total_memory) &&
      resolve(library, "cuDevicePrimaryCtxRetain", d.primary_context_retain) &&
      resolve(library, "cuDevicePrimaryCtxRelease_v2", d.primary_context_release) &&
      resolve(library, "cuCtxSetCurrent", d.context_set_current) &&
      resolve(library, "cuStreamCreate", d.stream_create) &&
      resolve(library, "cuStreamSynchronize", d.stream_synchronize) &&
      resolve(library, "cuStreamDestroy_v2", d.stream_destroy) &&
      resolve(library, "cuEventCreate", d.event_create) &&
      resolve(library, "cuEventRecord", d.event_record) &&
      resolve(library, "cuEventQuery", d.event_query) &&
      resolve(library, "cuEventSynchronize", d.event_synchronize) &&
      resolve(library, "cuEventDestroy_v2", d.event_destroy) &&
      resolve(library, "cuMemAllocAsync", d.mem_alloc_async) &&
      resolve(library, "cuMemFreeAsync", d.mem_free_async) &&
      resolve(library, "cuDeviceGetDefaultMemPool", d.default_mem_pool) &&
      resolve(library, "cuMemPoolSetAttribute", d.mem_pool_set_attribute) &&
      resolve(library, "cuMemHostAlloc", d.mem_host_alloc) &&
      resolve(library, "cuMemFreeHost", d.mem_free_host) &&
      resolve(library, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async) &&
      resolve(library, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async) &&
      resolve(library, "cuModuleLoadData", d.module_load_data) &&
      resolve(library, "cuModuleUnload", d.module_unload) &&
      resolve(library, "cuModuleGetFunction", d.module_get_function) &&
      resolve(library, "cuLaunchKernel", d.launch_kernel) &&
      resolve(library, "cuGetErrorString", d.error_string);
  if (!complete) {
    *why = "libcuda.so.1 lacks a call the engine uses (a CUDA driver older than 11.2)";
    return std::nullopt;
  }
  return d;
}

std::string Driver::describe(const char* call, CuResult result) const {
  const char* text = nullptr;
  if (error_string == nullptr || error_string(result, &text) != kCuSuccess || text == nullptr) {
    text = "unknown error";
  }
  return std::string(call) + ": " + text + " (" + std::to_string(result) + ")";
}

void Driver::check(CuResult result, const char* call) const {
  if (result != kCuSuccess) throw Error("cuda: " + describe(call, result));
}

}  // namespace lt::backend::cuda
