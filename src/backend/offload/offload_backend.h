#pragma once
#include <memory>

#include "backend/backend.h"
#include "backend/offload/runtime.h"

namespace lt::backend::offload {

// The backend of device <kind>:<index> on `device`.
std::unique_ptr<Backend> make_backend(std::shared_ptr<const Runtime> device, int index,
                                      const BackendSettings& settings);

}  // namespace lt::backend::offload
