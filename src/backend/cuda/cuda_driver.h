#pragma once
// The CUDA driver API calls the engine uses, as a table of function pointers: resolved from
// libcuda.so.1 with dlopen (so the engine builds and loads where there is no driver, and never
// links the toolkit's stub), or filled in by a test with a fake driver that runs kernels on the
// host. The types are the driver's ABI (cuda.h): handles are pointers, results ints, device
// pointers 64-bit integers.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace lt::backend::cuda {

using CuResult = int;
using CuDevice = int;
using CuDevicePtr = uint64_t;
using CuContext = void*;
using CuModule = void*;
using CuFunction = void*;
using CuStream = void*;
using CuEvent = void*;
using CuMemPool = void*;

constexpr CuResult kCuSuccess = 0;
constexpr CuResult kCuErrorNotReady = 600;
constexpr int kCuAttributeComputeCapabilityMajor = 75;
constexpr int kCuAttributeComputeCapabilityMinor = 76;
constexpr int kCuAttributeMemoryPoolsSupported = 115;
constexpr unsigned kCuStreamNonBlocking = 0x1;
constexpr unsigned kCuEventDisableTiming = 0x2;
constexpr int kCuMemPoolAttrReleaseThreshold = 4;

struct Driver {
  CuResult (*init)(unsigned flags) = nullptr;                                  // cuInit
  CuResult (*driver_version)(int* version) = nullptr;                          // cuDriverGetVersion
  CuResult (*device_count)(int* count) = nullptr;                              // cuDeviceGetCount
  CuResult (*device_get)(CuDevice* device, int ordinal) = nullptr;             // cuDeviceGet
  CuResult (*device_name)(char* name, int length, CuDevice device) = nullptr;  // cuDeviceGetName
  CuResult (*device_attribute)(int* value, int attribute, CuDevice device) = nullptr;
  CuResult (*device_total_memory)(size_t* bytes, CuDevice device) = nullptr;
  CuResult (*primary_context_retain)(CuContext* context, CuDevice device) = nullptr;
  CuResult (*primary_context_release)(CuDevice device) = nullptr;
  CuResult (*context_set_current)(CuContext context) = nullptr;
  CuResult (*stream_create)(CuStream* stream, unsigned flags) = nullptr;
  CuResult (*stream_synchronize)(CuStream stream) = nullptr;
  CuResult (*stream_destroy)(CuStream stream) = nullptr;
  CuResult (*event_create)(CuEvent* event, unsigned flags) = nullptr;
  CuResult (*event_record)(CuEvent event, CuStream stream) = nullptr;
  CuResult (*event_query)(CuEvent event) = nullptr;  // kCuErrorNotReady while pending
  CuResult (*event_synchronize)(CuEvent event) = nullptr;
  CuResult (*event_destroy)(CuEvent event) = nullptr;
  CuResult (*mem_alloc_async)(CuDevicePtr* ptr, size_t bytes, CuStream stream) = nullptr;
  CuResult (*mem_free_async)(CuDevicePtr ptr, CuStream stream) = nullptr;
  CuResult (*default_mem_pool)(CuMemPool* pool, CuDevice device) = nullptr;
  CuResult (*mem_pool_set_attribute)(CuMemPool pool, int attribute, void* value) = nullptr;
  CuResult (*mem_host_alloc)(void** ptr, size_t bytes, unsigned flags) = nullptr;  // pinned
  CuResult (*mem_free_host)(void* ptr) = nullptr;
  CuResult (*memcpy_htod_async)(CuDevicePtr dst, const void* src, size_t bytes,
                                CuStream stream) = nullptr;
  CuResult (*memcpy_dtoh_async)(void* dst, CuDevicePtr src, size_t bytes,
                                CuStream stream) = nullptr;
  CuResult (*module_load_data)(CuModule* module, const void* image) = nullptr;
  CuResult (*module_unload)(CuModule module) = nullptr;
  CuResult (*module_get_function)(CuFunction* function, CuModule module,
                                  const char* name) = nullptr;
  CuResult (*launch_kernel)(CuFunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                            unsigned block_x, unsigned block_y, unsigned block_z,
                            unsigned shared_bytes, CuStream stream, void** params,
                            void** extra) = nullptr;
  CuResult (*error_string)(CuResult error, const char** text) = nullptr;  // cuGetErrorString

  // libcuda.so.1 with every call above, or nullopt with `why` it is not there.
  static std::optional<Driver> open(std::string* why);

  // "cuLaunchKernel: an illegal memory access was encountered (700)".
  std::string describe(const char* call, CuResult result) const;
  // Throws lt::Error naming the device, `call` and the driver's message unless `result` is
  // success.
  void check(CuResult result, const char* call) const;
};

}  // namespace lt::backend::cuda
