#pragma once
#include <string>
#include <vector>

#include "ir/node.h"
#include "lazytensor/device.h"
#include "lazytensor/runtime.h"

namespace lt::runtime {

// The graph of `roots` built as mark_step() would build it, split into fused kernels as the
// CPU backend runs them, and the kernels handed to device kind `type`'s code generator and
// compiler for `arch` (backend/registry.h), without running anything.
CodegenCheck check_codegen(const std::vector<ir::NodePtr>& roots, DeviceType type,
                           const std::string& arch);

}  // namespace lt::runtime
