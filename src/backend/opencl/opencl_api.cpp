#include "backend/opencl/opencl_api.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include "backend/dynamic_symbol.h"
#include "backend/kernel_source.h"
#include "backend/opencl/opencl_source.h"
#include "lazytensor/error.h"

namespace lt::backend::opencl {

namespace {

constexpr ClInt kSuccess = 0;
constexpr ClInt kDeviceNotFound = -1;
constexpr ClInt kBuildProgramFailure = -11;
constexpr ClBitfield kDeviceTypeAll = 0xFFFFFFFF;
constexpr ClUint kPlatformName = 0x0902;
constexpr ClUint kDeviceName = 0x102B;
constexpr ClUint kDeviceVersion = 0x102F;
constexpr ClUint kDeviceMaxParameterSize = 0x1017;
constexpr ClUint kDeviceGlobalMemSize = 0x101F;
constexpr ClUint kDeviceMaxWorkGroupSize = 0x1004;
constexpr ClUint kDeviceSingleFpConfig = 0x101B;
constexpr ClUint kDeviceDoubleFpConfig = 0x1032;
constexpr uint64_t kFpDenorm = 1 << 0;
constexpr uint64_t kFpCorrectlyRoundedDivideSqrt = 1 << 7;
constexpr ClUint kProgramBuildLog = 0x1183;
constexpr ClBitfield kMemReadWrite = 1;
constexpr ClUint kTrue = 1, kFalse = 0;

std::string platform_name(const Api& api, PlatformId platform) {
  char name[256] = {};
  api.get_platform_info(platform, kPlatformName, sizeof name - 1, name, nullptr);
  return name;
}

std::string device_string(const Api& api, DeviceId device, ClUint what) {
  char text[512] = {};
  api.get_device_info(device, what, sizeof text - 1, text, nullptr);
  return text;
}

}  // namespace

std::optional<Api> Api::open(std::string* why) {
  // Opened once and kept for the process: the ICD's threads outlive any one device.
  static void* const loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (loader == nullptr) {
    *why = "no OpenCL ICD loader (libOpenCL.so.1 is not installed)";
    return std::nullopt;
  }
  Api api;
  const bool complete = resolve(loader, "clGetPlatformIDs", api.get_platform_ids) &&
                        resolve(loader, "clGetPlatformInfo", api.get_platform_info) &&
                        resolve(loader, "clGetDeviceIDs", api.get_device_ids) &&
                        resolve(loader, "clGetDeviceInfo", api.get_device_info) &&
                        resolve(loader, "clCreateContext", api.create_context) &&
                        resolve(loader, "clCreateCommandQueue", api.create_queue) &&
                        resolve(loader, "clCreateProgramWithSource", api.create_program) &&
                        resolve(loader, "clBuildProgram", api.build_program) &&
                        resolve(loader, "clGetProgramBuildInfo", api.get_build_info) &&
                        resolve(loader, "clCreateKernel", api.create_kernel) &&
                        resolve(loader, "clSetKernelArg", api.set_kernel_arg) &&
                        resolve(loader, "clEnqueueNDRangeKernel", api.enqueue_kernel) &&
                        resolve(loader, "clCreateBuffer", api.create_buffer) &&
                        resolve(loader, "clEnqueueWriteBuffer", api.enqueue_write) &&
                        resolve(loader, "clEnqueueReadBuffer", api.enqueue_read) &&
                        resolve(loader, "clFinish", api.finish) &&
                        resolve(loader, "clFlush", api.flush) &&
                        resolve(loader, "clEnqueueMarkerWithWaitList", api.enqueue_marker) &&
                        resolve(loader, "clWaitForEvents", api.wait_for_events) &&
                        resolve(loader, "clReleaseEvent", api.release_event) &&
                        resolve(loader, "clReleaseMemObject", api.release_mem) &&
                        resolve(loader, "clReleaseKernel", api.release_kernel) &&
                        resolve(loader, "clReleaseProgram", api.release_program) &&
                        resolve(loader, "clReleaseCommandQueue", api.release_queue) &&
                        resolve(loader, "clReleaseContext", api.release_context);
  if (!complete) {
    *why = "libOpenCL.so.1 lacks an OpenCL 1.2 call the engine uses";
    return std::nullopt;
  }
  return api;
}

// What the kernels need of a device that OpenCL leaves optional, or empty when it has it all.
std::string missing_features(const Api& api, DeviceId device) {
  uint64_t single = 0, double_config = 0;
  size_t group = 0;
  api.get_device_info(device, kDeviceSingleFpConfig, sizeof single, &single, nullptr);
  api.get_device_info(device, kDeviceDoubleFpConfig, sizeof double_config, &double_config, nullptr);
  api.get_device_info(device, kDeviceMaxWorkGroupSize, sizeof group, &group, nullptr);
  std::string missing;
  const auto add = [&](const char* what) {
    missing += (missing.empty() ? "" : ", ") + std::string(what);
  };
  if (double_config == 0) add("f64 (cl_khr_fp64)");
  if ((single & kFpDenorm) == 0) add("f32 subnormals");
  if ((single & kFpCorrectlyRoundedDivideSqrt) == 0)
    add("correctly rounded f32 division and square root");
  if (group < 256) add("work-groups of 256");
  return missing;
}

std::optional<FoundDevice> find_device(const Api& api, std::string* why) {
  ClUint count = 0;
  // The loader answers an error (-1001, no platform) where no ICD is installed.
  if (api.get_platform_ids(0, nullptr, &count) != kSuccess || count == 0) {
    *why = "no OpenCL platform (an ICD such as Debian's pocl-opencl-icd is not installed)";
    return std::nullopt;
  }
  std::vector<PlatformId> platforms(count);
  if (api.get_platform_ids(count, platforms.data(), nullptr) != kSuccess) {
    *why = "the OpenCL loader did not list its platforms";
    return std::nullopt;
  }
  std::string searched;
  for (PlatformId platform : platforms) {
    DeviceId device = nullptr;
    const ClInt status = api.get_device_ids(platform, kDeviceTypeAll, 1, &device, nullptr);
    searched += (searched.empty() ? "" : ", ") + platform_name(api, platform);
    if (status == kDeviceNotFound || status != kSuccess || device == nullptr) continue;
    const std::string name = device_string(api, device, kDeviceName);
    if (const std::string missing = missing_features(api, device); !missing.empty()) {
      searched += " (" + name + " lacks " + missing + ")";
      continue;
    }
    return FoundDevice{device, name,
                       platform_name(api, platform) + ": " + name + ", " +
                           device_string(api, device, kDeviceVersion)};
  }
  *why = "no OpenCL device the kernels can run on, on the platforms " + searched;
  return std::nullopt;
}

std::shared_ptr<Device> Device::open(std::string* why) {
  std::optional<Api> api = Api::open(why);
  if (!api) return nullptr;
  std::optional<FoundDevice> found = find_device(*api, why);
  if (!found) return nullptr;
  std::shared_ptr<Device> opened(new Device);
  opened->api_ = *api;
  opened->device_ = found->id;
  opened->name_ = found->name;
  opened->description_ = found->description;
  ClInt error = kSuccess;
  opened->context_ = api->create_context(nullptr, 1, &found->id, nullptr, nullptr, &error);
  if (error != kSuccess) {
    *why = found->description + " refused a context (error " + std::to_string(error) + ")";
    return nullptr;
  }
  opened->queue_ = api->create_queue(opened->context_, found->id, 0, &error);
  if (error != kSuccess) {
    *why = found->description + " refused a queue (error " + std::to_string(error) + ")";
    return nullptr;
  }
  size_t max_arguments = 0;
  if (api->get_device_info(found->id, kDeviceMaxParameterSize, sizeof max_arguments, &max_arguments,
                           nullptr) == kSuccess &&
      max_arguments > 0) {
    opened->max_argument_bytes_ = max_arguments;
  }
  uint64_t global_memory = 0;
  if (api->get_device_info(found->id, kDeviceGlobalMemSize, sizeof global_memory, &global_memory,
                           nullptr) == kSuccess) {
    opened->global_memory_bytes_ = static_cast<int64_t>(global_memory);
  }
  return opened;
}

Device::~Device() {
  if (queue_ != nullptr) {
    api_.finish(queue_);
    api_.release_queue(queue_);
  }
  if (context_ != nullptr) api_.release_context(context_);
}

void Device::check(ClInt status, const char* call) {
  if (status != kSuccess) {
    throw Error(std::string("opencl: ") + call + " failed with error " + std::to_string(status));
  }
}

bool Device::scalars_by_value(const compiler::KernelProgram& program) const {
  return opencl_scalars_by_value(program);
}

std::shared_ptr<void> Device::build(const std::vector<const compiler::KernelProgram*>& programs,
                                    const std::vector<std::string>& symbols,
                                    const std::string& routines) const {
  return build_source(generate_source(programs, symbols) + routines, build_options());
}

std::shared_ptr<void> Device::build_source(const std::string& source,
                                           const std::string& options) const {
  const char* text = source.c_str();
  const size_t length = source.size();
  ClInt error = kSuccess;
  Program program = api_.create_program(context_, 1, &text, &length, &error);
  check(error, "clCreateProgramWithSource");
  std::shared_ptr<void> owned(program, [api = api_](void* p) { api.release_program(p); });
  const ClInt status = api_.build_program(program, 1, &device_, options.c_str(), nullptr, nullptr);
  if (status != kSuccess) {
    size_t size = 0;
    api_.get_build_info(program, device_, kProgramBuildLog, 0, nullptr, &size);
    std::string log(size, '\0');
    api_.get_build_info(program, device_, kProgramBuildLog, size, log.data(), nullptr);
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    throw Error("opencl: the kernels did not build (error " + std::to_string(status) +
                (status == kBuildProgramFailure ? ", the compiler's log follows" : "") + ")\n" +
                log);
  }
  return owned;
}

std::shared_ptr<void> Device::kernel(const std::shared_ptr<void>& program,
                                     const std::string& name) const {
  ClInt error = kSuccess;
  Kernel kernel = api_.create_kernel(program.get(), name.c_str(), &error);
  check(error, "clCreateKernel");
  // The kernel holds its program alive: its code lives there.
  return std::shared_ptr<void>(kernel, [api = api_, program](void* k) { api.release_kernel(k); });
}

std::shared_ptr<void> Device::allocate(size_t bytes) const {
  ClInt error = kSuccess;
  // OpenCL refuses a buffer of 0 bytes; an empty tensor's takes one.
  Mem buffer = api_.create_buffer(context_, kMemReadWrite, bytes == 0 ? 1 : bytes, nullptr, &error);
  check(error, "clCreateBuffer");
  return std::shared_ptr<void>(buffer, [api = api_](void* m) { api.release_mem(m); });
}

void Device::write(void* buffer, const void* src, size_t bytes, bool blocking) const {
  if (bytes == 0) return;
  check(api_.enqueue_write(queue_, buffer, blocking ? kTrue : kFalse, 0, bytes, src, 0, nullptr,
                           nullptr),
        "clEnqueueWriteBuffer");
}

void Device::read(const void* buffer, void* dst, size_t bytes) const {
  if (bytes == 0) return;
  check(api_.enqueue_read(queue_, const_cast<void*>(buffer), kTrue, 0, bytes, dst, 0, nullptr,
                          nullptr),
        "clEnqueueReadBuffer");
}

void Device::set_arg(void* kernel, int index, size_t bytes, const void* value) const {
  check(api_.set_kernel_arg(kernel, static_cast<ClUint>(index), bytes, value), "clSetKernelArg");
}

void Device::launch(void* kernel, size_t global, size_t local) const {
  check(api_.enqueue_kernel(queue_, kernel, 1, nullptr, &global, local ? &local : nullptr, 0,
                            nullptr, nullptr),
        "clEnqueueNDRangeKernel");
}

void Device::finish() const {
  check(api_.finish(queue_), "clFinish");
}

std::shared_ptr<void> Device::mark() const {
  Event event = nullptr;
  check(api_.enqueue_marker(queue_, 0, nullptr, &event), "clEnqueueMarkerWithWaitList");
  // Submitted now: a driver may otherwise hold the step until something waits on the queue.
  const ClInt flushed = api_.flush(queue_);
  if (flushed != kSuccess) api_.release_event(event);
  check(flushed, "clFlush");
  return std::shared_ptr<void>(event, [api = api_](void* e) { api.release_event(e); });
}

void Device::wait(const std::shared_ptr<void>& marker) const {
  const Event event = marker.get();
  check(api_.wait_for_events(1, &event), "clWaitForEvents");
}

}  // namespace lt::backend::opencl
