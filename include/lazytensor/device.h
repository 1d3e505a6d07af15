#pragma once
#include <cstdint>
#include <string>

namespace lt {

// Where a tensor lives. Every tensor has one; an op's operands must all be on one device (a
// number passed to an op is on every device). The CPU backend serves any number of CPU
// devices, each with its own memory accounting, stream and threads (as JAX's forced host
// device count does), which lets multi-device code run on one machine.
enum class DeviceType : uint8_t { cpu, cuda };
const char* device_type_name(DeviceType type);

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  std::string str() const;  // "cpu:0"
  bool operator==(const Device&) const = default;
};

// The device that factories (from_vector, zeros, rand, ...) create tensors on: cpu:0 unless
// set. Per thread, like a CUDA current device.
Device default_device();
void set_default_device(const Device& device);

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
