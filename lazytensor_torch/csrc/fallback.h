#pragma once
#include <ATen/core/dispatch/Dispatcher.h>

namespace lazytensor_torch {

// Runs the op on the CPU (copying its device operands there and its results back), counted
// under `Fallback` and the op's name. Registered for every op without a kernel; kernels call
// it for the cases they do not handle (at::native::call_fallback_fn).
void counted_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace lazytensor_torch
