#pragma once
// Backends register a factory per device type; the runtime asks for the backend of a device
// and gets the same instance every time (created on first use, never destroyed: tensors in
// static storage may release buffers at exit). The runtime asks it; backends only register.
//
// The backends built into the library register themselves: each folder src/backend/<name>/
// defines lt::backend::<name>::register_backend(), and CMake's lazytensor_add_backend(<name>)
// lists it for the registry, which calls every listed one before its first answer. The
// registry includes no backend.
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "lazytensor/device.h"

namespace lt::backend {

using BackendFactory =
    std::function<std::unique_ptr<Backend>(int index, const BackendSettings& settings)>;

// Replaces any factory for `type`.
void register_backend(DeviceType type, BackendFactory factory);
// Stops serving `type` (for tests). Backends already created stay alive, since buffers may
// still point into them, and wait_device_ops() still waits for them.
void unregister_backend(DeviceType type);
// Throws lt::Error naming the device when no backend serves it. `settings` are handed to the
// backend if this call creates it.
Backend& backend_for(const Device& device, const BackendSettings& settings);
// Every backend created so far.
std::vector<Backend*> live_backends();

}  // namespace lt::backend
