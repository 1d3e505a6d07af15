#pragma once
// The backend behind a device, for the runtime's own files: the executor, the device facade
// (runtime/device.h) and the public runtime API. Front ends use the facade instead
// (layering.toml's runtime-private room).
#include "backend/backend.h"
#include "lazytensor/device.h"

namespace lt::runtime {

backend::Backend& backend_of(const Device& device);

}  // namespace lt::runtime
