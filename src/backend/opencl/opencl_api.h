#pragma once
// The OpenCL 1.2 calls the engine uses, through the ICD loader opened with dlopen (so the engine
// builds and loads where OpenCL is absent), and a device with its context and in-order queue.
// The types and constants used are declared here: they are the ABI the loader exports.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/offload/runtime.h"

namespace lt::backend::opencl {

using ClInt = int32_t;
using ClUint = uint32_t;
using ClBitfield = uint64_t;
using PlatformId = void*;
using DeviceId = void*;
using Context = void*;
using Queue = void*;
using Program = void*;
using Kernel = void*;
using Mem = void*;
using Event = void*;

// The loader's entry points, resolved once.
struct Api {
  ClInt (*get_platform_ids)(ClUint, PlatformId*, ClUint*) = nullptr;
  ClInt (*get_platform_info)(PlatformId, ClUint, size_t, void*, size_t*) = nullptr;
  ClInt (*get_device_ids)(PlatformId, ClBitfield, ClUint, DeviceId*, ClUint*) = nullptr;
  ClInt (*get_device_info)(DeviceId, ClUint, size_t, void*, size_t*) = nullptr;
  Context (*create_context)(const intptr_t*, ClUint, const DeviceId*,
                            void (*)(const char*, const void*, size_t, void*), void*,
                            ClInt*) = nullptr;
  Queue (*create_queue)(Context, DeviceId, ClBitfield, ClInt*) = nullptr;
  Program (*create_program)(Context, ClUint, const char**, const size_t*, ClInt*) = nullptr;
  ClInt (*build_program)(Program, ClUint, const DeviceId*, const char*, void (*)(Program, void*),
                         void*) = nullptr;
  ClInt (*get_build_info)(Program, DeviceId, ClUint, size_t, void*, size_t*) = nullptr;
  Kernel (*create_kernel)(Program, const char*, ClInt*) = nullptr;
  ClInt (*set_kernel_arg)(Kernel, ClUint, size_t, const void*) = nullptr;
  ClInt (*enqueue_kernel)(Queue, Kernel, ClUint, const size_t*, const size_t*, const size_t*,
                          ClUint, const Event*, Event*) = nullptr;
  Mem (*create_buffer)(Context, ClBitfield, size_t, void*, ClInt*) = nullptr;
  ClInt (*enqueue_write)(Queue, Mem, ClUint, size_t, size_t, const void*, ClUint, const Event*,
                         Event*) = nullptr;
  ClInt (*enqueue_read)(Queue, Mem, ClUint, size_t, size_t, void*, ClUint, const Event*,
                        Event*) = nullptr;
  ClInt (*finish)(Queue) = nullptr;
  ClInt (*flush)(Queue) = nullptr;
  ClInt (*enqueue_marker)(Queue, ClUint, const Event*, Event*) = nullptr;
  ClInt (*wait_for_events)(ClUint, const Event*) = nullptr;
  ClInt (*release_event)(Event) = nullptr;
  ClInt (*release_mem)(Mem) = nullptr;
  ClInt (*release_kernel)(Kernel) = nullptr;
  ClInt (*release_program)(Program) = nullptr;
  ClInt (*release_queue)(Queue) = nullptr;
  ClInt (*release_context)(Context) = nullptr;

  // The loader with every call above, or nullopt with `why` it is not there.
  static std::optional<Api> open(std::string* why);
};

// The first device of the first platform that has one with what the kernels need beyond OpenCL
// 1.2's minimum (f64, f32 subnormals, correctly rounded f32 division and square root, work-groups
// of 256), without opening it: its handle and
// "Portable Computing Language: pthread-skylake-avx512-Intel(R) Xeon(R) Processor, OpenCL 3.0
// PoCL ...". Nullopt with `why` where there is none.
struct FoundDevice {
  DeviceId id;
  std::string name;  // "pthread-skylake-avx512-Intel(R) Xeon(R) Processor"
  std::string description;
};
std::optional<FoundDevice> find_device(const Api& api, std::string* why);

// One OpenCL device (the first of the first platform that has one): its context and one
// in-order queue, as the offload backend's runtime. Calls that fail throw lt::Error naming the
// call and OpenCL's error code.
class Device final : public offload::Runtime {
 public:
  // Null with `why` where there is no loader, platform or device.
  static std::shared_ptr<Device> open(std::string* why);
  ~Device() override;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const Api& api() const { return api_; }
  Context context() const { return context_; }
  Queue queue() const { return queue_; }
  DeviceId id() const { return device_; }
  // As find_device gives them.
  const std::string& name() const { return name_; }
  std::string description() const override { return description_; }
  // The most bytes of arguments one kernel takes (at least 1024 by the standard).
  size_t max_argument_bytes() const { return max_argument_bytes_; }
  // The memory the device reports (PoCL reports the host's and enforces no limit).
  int64_t global_memory_bytes() const override { return global_memory_bytes_; }

  std::string kind() const override { return "opencl"; }
  KernelDialect dialect() const override { return KernelDialect::opencl; }
  bool scalars_by_value(const compiler::KernelProgram& program) const override;
  std::string matmul_library() const override { return "OpenCL C (generated kernel)"; }

  // Builds `source` with `options`; throws lt::Error with the compiler's log when it fails.
  // The program is released with the returned handle.
  std::shared_ptr<void> build_source(const std::string& source, const std::string& options) const;
  std::shared_ptr<void> build(const std::vector<const compiler::KernelProgram*>& programs,
                              const std::vector<std::string>& symbols,
                              const std::string& routines) const override;
  std::shared_ptr<void> kernel(const std::shared_ptr<void>& program,
                               const std::string& name) const override;
  std::shared_ptr<void> allocate(size_t bytes) const override;
  void write(void* buffer, const void* src, size_t bytes, bool blocking) const override;
  void read(const void* buffer, void* dst, size_t bytes) const override;
  void set_arg(void* kernel, int index, size_t bytes, const void* value) const override;
  void launch(void* kernel, size_t global, size_t local) const override;
  void finish() const override;
  std::shared_ptr<void> mark() const override;
  void wait(const std::shared_ptr<void>& marker) const override;

  // Throws lt::Error naming `call` where `status` is not CL_SUCCESS.
  static void check(ClInt status, const char* call);

 private:
  Device() = default;
  Api api_;
  DeviceId device_ = nullptr;
  Context context_ = nullptr;
  Queue queue_ = nullptr;
  std::string name_;
  std::string description_;
  size_t max_argument_bytes_ = 1024;
  int64_t global_memory_bytes_ = 0;
};

}  // namespace lt::backend::opencl
