#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/kernel_program.h"

namespace lt::compiler {

// A kernel ready to run: evaluates its program over n elements of contiguous input arrays
// and writes n elements of each output (a reduction kernel writes the values it folds).
// Outputs may be the very arrays of inputs (in-place updates): every element is read before
// it is written.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  virtual void run(const void* const* inputs, void* const* outputs, const double* scalars,
                   int64_t n) const = 0;
  virtual const char* method() const = 0;  // "native" or "interpreter"
};

std::shared_ptr<CompiledKernel> make_interpreted_kernel(const KernelProgram& program);

// C++ source for the given programs, one extern "C" function per program named by `symbols`,
// preceded by the kernel prelude. The source depends only on the programs.
std::string generate_source(const std::vector<const KernelProgram*>& programs,
                            const std::vector<std::string>& symbols);

// Compiles generated source with the system C++ compiler and loads it, with an on-disk cache
// keyed by the source and the compiler command. Throws lt::Error when the compiler fails.
std::vector<std::shared_ptr<CompiledKernel>> compile_native(
    const std::vector<const KernelProgram*>& programs);

// The in-memory kernel cache in front of both methods: programs already compiled with the
// current method are returned at once; the rest are compiled together.
std::vector<std::shared_ptr<const CompiledKernel>> get_kernels(
    const std::vector<const KernelProgram*>& programs);
size_t kernel_cache_size();

}  // namespace lt::compiler
