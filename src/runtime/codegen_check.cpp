#include "runtime/codegen_check.h"

#include <string>
#include <vector>

#include "backend/registry.h"
#include "compiler/fusion.h"
#include "runtime/config.h"
#include "runtime/graph_signature.h"

namespace lt::runtime {

CodegenCheck check_codegen(const std::vector<ir::NodePtr>& roots, DeviceType type,
                           const std::string& arch) {
  std::vector<const ir::Node*> root_nodes;
  for (const ir::NodePtr& root : roots) root_nodes.push_back(root.get());
  ir::Graph graph;
  GraphSignature signature;
  std::vector<uint32_t> root_outputs;
  build_graph(root_nodes, 0, graph, signature, root_outputs);
  // Split as mark_step() splits it, kernel length included (LT_MAX_KERNEL_OPS).
  compiler::FusionOptions options;
  options.max_kernel_ops = config().max_kernel_ops;
  const std::vector<compiler::Kernel> kernels = compiler::partition(graph, options);
  std::vector<const compiler::KernelProgram*> programs;
  std::vector<std::string> names;
  int opaque = 0;
  for (const compiler::Kernel& kernel : kernels) {
    if (kernel.opaque >= 0) {
      ++opaque;
      continue;
    }
    programs.push_back(&kernel.program);
    names.push_back("lt_kernel_" + std::to_string(names.size()));
  }
  CodegenCheck check = backend::check_codegen(type, programs, names, arch);
  check.opaque_ops = opaque;
  for (size_t k = 0; k < programs.size() && k < check.kernels.size(); ++k) {
    check.kernels[k].reduction = programs[k]->reduce != compiler::ReduceKind::None;
  }
  return check;
}

}  // namespace lt::runtime
