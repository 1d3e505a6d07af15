#pragma once
// The backend behind a device, for the runtime's own files: the executor, the device facade
// (runtime/device.h) and the public runtime API. Front ends use the facade instead
// (layering.toml's runtime-private room).
#include "backend/backend.h"
#include "lazytensor/device.h"

namespace lt::runtime {

// Creates the backend, with backend_settings(), on first use.
backend::Backend& backend_of(const Device& device);
// The runtime's settings as a backend takes them (kernel threads, memory limit, how kernels
// are compiled: LT_COMPILER, LT_CXX, the kernel cache's place and bounds).
backend::BackendSettings backend_settings();

}  // namespace lt::runtime
