#pragma once
#include <memory>

#include "backend/backend.h"

namespace lt::backend::cpu {

// The CPU device number `index`: its own memory accounting, stream and kernel threads.
std::unique_ptr<Backend> make_backend(int index, const BackendSettings& settings);
// Registers make_backend for DeviceType::cpu (the registry calls it; see backend/registry.h).
void register_backend();

}  // namespace lt::backend::cpu
