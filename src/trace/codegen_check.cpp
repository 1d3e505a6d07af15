// lt::check_codegen: the pending values of the tensors, handed to the runtime's check
// (runtime/codegen_check.h).
#include "lazytensor/codegen_check.h"

#include <vector>

#include "lazytensor/error.h"
#include "runtime/codegen_check.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"

namespace lt {

CodegenCheck check_codegen(const std::vector<Tensor>& tensors, const std::string& device,
                           const std::string& arch) {
  const DeviceType type = parse_device(device).type;
  // Held for the whole check: the graph's nodes stay alive even if a tensor is rebound.
  std::vector<ir::NodePtr> roots;
  {
    const runtime::TraceScope scope("check_codegen", runtime::TraceScope::Purpose::read);
    for (const Tensor& t : tensors) {
      if (!t.defined()) throw Error("check_codegen: a tensor is undefined");
      if (ir::NodePtr value = t.impl()->ir) roots.push_back(std::move(value));
    }
  }
  return runtime::check_codegen(roots, type, arch);
}

}  // namespace lt
