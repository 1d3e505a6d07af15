// C++ for kernel programs: the kernel prelude, then each program rendered in the CPU dialect
// (backend/kernel_source.h); the prelude's functors are the same ones the interpreter runs.
#include <string>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/kernel_source.h"

namespace lt::backend::cpu {

extern const char* const kKernelPrelude;  // kernel_prelude.h with op_table.def inlined

std::string generate_source(const std::vector<const KernelProgram*>& programs,
                            const std::vector<std::string>& symbols) {
  std::string out = kKernelPrelude;
  out += "\n";
  for (size_t i = 0; i < programs.size(); ++i) {
    out += render_kernel(*programs[i], symbols[i], KernelDialect::cpu);
  }
  return out;
}

}  // namespace lt::backend::cpu
