// Every aten op without a lazytensor kernel runs on the CPU: its device operands are computed
// and copied to the host, the CPU kernel runs, and the results and mutated operands are copied
// back (at::native::cpu_fallback). Each call is counted, under the engine's counter `Fallback`
// and `aten::<op>` for the op, as torch-xla counts its fallbacks: a fallback costs a host read,
// which cuts the graph. Ops that return views cannot fall back (a CPU copy cannot alias device
// storage): they raise an error naming the op.
#include "fallback.h"

#include <ATen/native/CPUFallback.h>
#include <lazytensor/metrics.h>
#include <torch/library.h>

#include <string>

namespace lazytensor_torch {

void counted_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  lt::metrics::increment("Fallback");
  lt::metrics::increment(name.overload_name.empty() ? name.name
                                                    : name.name + "." + name.overload_name);
  at::native::cpu_fallback(op, stack, /*error_on_views=*/true);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&counted_cpu_fallback>());
}

}  // namespace lazytensor_torch
