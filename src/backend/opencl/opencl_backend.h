#pragma once
#include <memory>

#include "backend/backend.h"

namespace lt::backend::opencl {

// The backend of device opencl:<index> (only opencl:0); throws lt::Error naming the device and
// why it cannot be opened.
std::unique_ptr<Backend> make_backend(int index, const BackendSettings& settings);

}  // namespace lt::backend::opencl
