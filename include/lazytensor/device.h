#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lt {

// Where a tensor lives. Every tensor has one; an op's operands must all be on one device (a
// number passed to an op is on every device). The CPU backend serves any number of CPU
// devices, each with its own memory accounting, stream and threads (as JAX's forced host
// device count does), which lets multi-device code run on one machine.
enum class DeviceType : uint8_t { cpu, cuda, opencl };
const char* device_type_name(DeviceType type);

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  std::string str() const;  // "cpu:0"
  bool operator==(const Device&) const = default;
};

// "cpu", "cpu:1", "opencl", "cuda:0" (index 0 when omitted); lt::Error naming the kinds for
// another name.
Device parse_device(const std::string& name);

// Each device kind this build knows, and whether this machine can use it: the reason when not
// (no backend in this build, no driver, no platform), what was found when it can.
struct DeviceKind {
  std::string name;  // "cpu", "cuda", "opencl"
  bool available = false;
  std::string reason;
};
std::vector<DeviceKind> device_kinds();

// The device that factories (from_vector, zeros, rand, ...) create tensors on: cpu:0 unless
// set, or LT_DEVICE (a name parse_device takes) at the process's first use. Per thread, like a
// CUDA current device. Setting an unavailable device throws lt::Error naming it and the reason
// device_kinds() gives.
Device default_device();
void set_default_device(const Device& device);
void set_default_device(const std::string& name);

// Sets the default device for a scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(const Device& device) : saved_(default_device()) {
    set_default_device(device);
  }
  ~DeviceGuard() { set_default_device(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device saved_;
};

}  // namespace lt
