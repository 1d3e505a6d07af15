#pragma once
// Drivers and toolkits (OpenCL's loader, the CUDA driver, NVRTC, cuBLASLt) are opened with dlopen
// and their calls resolved into tables of function pointers, so that the engine builds and loads
// where they are absent.
#include <dlfcn.h>

namespace lt::backend {

// `slot` set to `library`'s symbol `name`; false where it has none.
template <class F>
bool resolve(void* library, const char* name, F& slot) {
  slot = reinterpret_cast<F>(dlsym(library, name));
  return slot != nullptr;
}

}  // namespace lt::backend
