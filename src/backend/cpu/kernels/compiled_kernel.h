#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "compiler/kernel_program.h"

namespace lt::backend::cpu {

// The neutral kernel programs (compiler/kernel_program.h) these kernels run.
using compiler::Instr;
using compiler::InstrKind;
using compiler::KernelProgram;
using compiler::ReduceKind;

// A kernel ready to run: evaluates its program over n elements of contiguous input arrays
// and writes n elements of each output (a reduction kernel writes the values it folds).
// `start` is the position of the first element in the kernel's iteration space (an Iota reads
// it; elementwise kernels only).
// Outputs may be the very arrays of inputs (in-place updates): every element is read before
// it is written.
class CompiledKernel {
 public:
  virtual ~CompiledKernel() = default;
  virtual void run(const void* const* inputs, void* const* outputs, const double* scalars,
                   int64_t start, int64_t n) const = 0;
  virtual const char* method() const = 0;  // "native" or "interpreter"
  // The kernel that runs now. A tiered kernel answers its interpreted form until its native
  // code is ready; launches resolve once per work unit, so each unit runs one code.
  virtual const CompiledKernel& resolve() const { return *this; }
};

std::shared_ptr<CompiledKernel> make_interpreted_kernel(const KernelProgram& program);

// C++ source for the given programs, one extern "C" function per program named by `symbols`,
// preceded by the kernel prelude. The source depends only on the programs.
std::string generate_source(const std::vector<const KernelProgram*>& programs,
                            const std::vector<std::string>& symbols);

// Whether this CPU decodes stored 8-bit codes faster by byte permutes across two registers than
// by gathers (KernelSettings::decode_codes_by_permutes).
bool byte_permutes_beat_gathers();

// Whether this CPU's kernels run faster with software prefetches of their inputs
// (KernelSettings::software_prefetch).
bool software_prefetch_helps();

// Compiles generated source with the system C++ compiler and loads it, with an on-disk cache
// (in options.cache_dir) keyed by the source and the compiler command. Throws lt::Error when
// the compiler fails.
std::vector<std::shared_ptr<CompiledKernel>> compile_native(
    const std::vector<const KernelProgram*>& programs, const KernelSettings& options);

// The in-memory kernel cache in front of both methods: programs already compiled with the
// requested method are returned at once. The rest are compiled in parallel batches, in the
// background when options.tiered (running interpreted meanwhile). A native compile that
// fails leaves its kernels interpreted and says so once on stderr.
std::vector<std::shared_ptr<const CompiledKernel>> get_kernels(
    const std::vector<const KernelProgram*>& programs, const KernelSettings& options);
size_t kernel_cache_size();
void clear_kernel_cache();
// Blocks until every background kernel compile has finished.
void wait_background_compiles();

}  // namespace lt::backend::cpu
