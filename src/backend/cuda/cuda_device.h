#pragma once
// One CUDA GPU as the offload backend's runtime, through the driver API table: its primary
// context, one non-blocking stream, stream-ordered allocation (cuMemAllocAsync: a buffer freed on
// the host is released after the work queued on it), uploads staged through pinned host memory
// (so the caller's memory is free at once and no upload waits for the device), programs compiled
// by a KernelCompiler (NVRTC to the GPU's own architecture), kept on disk by a hash of the
// compiler's version, the architecture and the source, and launched with their arguments
// gathered by the engine.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/cublaslt.h"
#include "backend/cuda/cuda_driver.h"
#include "backend/cuda/cuda_source.h"
#include "backend/offload/runtime.h"

namespace lt::backend::cuda {

class Device final : public offload::Runtime {
 public:
  // GPU `ordinal` of `driver`, or null with `why` it cannot be used. Compiled programs are
  // kept in `cache_dir`/cuda (none when it is empty), at most `cache_bytes` of them, the least
  // recently used dropped first. Products go to `blas` where there is one, else to the
  // generated tiled kernel.
  static std::shared_ptr<Device> open(const Driver& driver,
                                      std::shared_ptr<const KernelCompiler> compiler,
                                      std::optional<BlasLt> blas, int ordinal,
                                      const std::string& cache_dir, size_t cache_bytes,
                                      std::string* why);
  ~Device() override;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  std::string kind() const override { return "cuda"; }
  std::string description() const override;
  KernelDialect dialect() const override { return KernelDialect::cuda; }
  int64_t global_memory_bytes() const override;
  // CUDA kernels read their scalars from an array in device memory, read where used (no
  // register holds hundreds of them for a whole loop).
  bool scalars_by_value(const compiler::KernelProgram&) const override { return false; }
  std::string matmul_library() const override;
  // cuBLASLt's workspace, once a product has needed it.
  int64_t reserved_bytes() const override;

  std::shared_ptr<void> build(const std::vector<const compiler::KernelProgram*>& programs,
                              const std::vector<std::string>& symbols,
                              const std::string& routines) const override;
  std::shared_ptr<void> kernel(const std::shared_ptr<void>& program,
                               const std::string& name) const override;
  std::shared_ptr<void> allocate(size_t bytes) const override;
  // Always staged through pinned memory (in pieces of at most 64 MiB): `src` is free when this
  // returns, blocking or not.
  void write(void* buffer, const void* src, size_t bytes, bool blocking) const override;
  void read(const void* buffer, void* dst, size_t bytes) const override;
  void set_arg(void* kernel, int index, size_t bytes, const void* value) const override;
  void launch(void* kernel, size_t global, size_t local) const override;
  void finish() const override;
  std::shared_ptr<void> mark() const override;
  void wait(const std::shared_ptr<void>& marker) const override;
  // cuBLASLt: f32 (computed in f32, no TF32), f64, and bf16 or f16 in f32 (stored as the
  // operands' dtype or f32).
  bool library_matmul(const void* a, const void* b, void* c, int64_t batches, int64_t m, int64_t n,
                      int64_t k, DType operands, DType output) const override;

 private:
  struct State;
  explicit Device(std::shared_ptr<State> state);
  // The image of `source`: from the disk cache (`cached`), or compiled (and stored).
  std::string image(const std::string& source, bool* cached) const;
  std::shared_ptr<State> state_;  // shared with the handles' deleters
};

}  // namespace lt::backend::cuda
