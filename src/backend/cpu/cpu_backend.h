#pragma once
#include <memory>

#include "backend/backend.h"

namespace lt::backend::cpu {

// The CPU device number `index`: its own memory accounting, stream and kernel threads.
std::unique_ptr<Backend> make_backend(int index);

}  // namespace lt::backend::cpu
