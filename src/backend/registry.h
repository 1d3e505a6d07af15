#pragma once
// Backends register a factory per device type; the runtime asks for the backend of a device
// and gets the same instance every time (created on first use, never destroyed: tensors in
// static storage may release buffers at exit). Only the runtime includes this.
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "lazytensor/device.h"

namespace lt::backend {

using BackendFactory = std::function<std::unique_ptr<Backend>(int index)>;

// Replaces any factory for `type`. The CPU backend is registered from the start.
void register_backend(DeviceType type, BackendFactory factory);
// Stops serving `type` (for tests). Backends already created stay alive, since buffers may
// still point into them, and wait_device_ops() still waits for them.
void unregister_backend(DeviceType type);
// Throws lt::Error naming the device when no backend serves it.
Backend& backend_for(const Device& device);
// Every backend created so far.
std::vector<Backend*> live_backends();

}  // namespace lt::backend
