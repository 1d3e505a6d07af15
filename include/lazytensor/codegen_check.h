#pragma once
// Code generation for a device kind, checked where the device is absent: the fused kernels of a
// pending computation rendered in the kind's dialect and compiled by its compiler (NVRTC for
// cuda), with what the compiler reports per kernel. Nothing runs; the tensors stay pending.
#include <string>
#include <vector>

#include "lazytensor/runtime.h"
#include "lazytensor/tensor.h"

namespace lt {

// The fused kernels of the pending computation of `tensors` (one step's graph, as mark_step()
// would launch it), rendered for device kind `device` ("cuda") and compiled for `arch`.
// lt::Error when this machine has no compiler for that kind (no NVRTC).
CodegenCheck check_codegen(const std::vector<Tensor>& tensors, const std::string& device,
                           const std::string& arch);

}  // namespace lt
