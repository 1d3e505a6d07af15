#pragma once
// What the backends of devices with their own memory (OpenCL, CUDA) need from a device's API:
// memory, one in-order queue of copies and launches, and programs built from source in the
// device's kernel dialect. The executable and the backend (offload_executable.h,
// offload_backend.h) are written once against this; each device folder implements it over its
// driver.
//
// Handles are opaque: a buffer is what Buffer::data() holds (an OpenCL cl_mem, a CUDA device
// pointer), passed to a kernel as an 8-byte argument; a kernel's arguments are set one by one
// and taken by its next launch. Only the backend's stream calls the queue's methods, so a
// runtime needs no locking of its own beyond allocation. Failed calls throw lt::Error naming
// the device call and the driver's error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/kernel_source.h"
#include "compiler/kernel_program.h"

namespace lt::backend::offload {

class Runtime {
 public:
  virtual ~Runtime() = default;

  // The device kind's name in device strings: "opencl", "cuda".
  virtual std::string kind() const = 0;
  // The device, as `devices` describes it.
  virtual std::string description() const = 0;
  virtual KernelDialect dialect() const = 0;
  // The memory the device reports; 0 when it reports none.
  virtual int64_t global_memory_bytes() const = 0;
  // Device memory the runtime holds for itself (a library's workspace), counted with the
  // engine's buffers against the device's memory.
  virtual int64_t reserved_bytes() const { return 0; }
  // Whether a fused kernel of `program` takes its scalars as arguments (else as one array in
  // device memory, written in stream order before its launch).
  virtual bool scalars_by_value(const compiler::KernelProgram& program) const = 0;
  // The library or kernel that computes matrix products, for lt::matmul_library.
  virtual std::string matmul_library() const = 0;

  // The fused kernels of `programs` as functions named `symbols`, with the prelude they need
  // and `routines` (offload::Routines' source, in this dialect), built for the device: the
  // program, released with the returned handle.
  virtual std::shared_ptr<void> build(const std::vector<const compiler::KernelProgram*>& programs,
                                      const std::vector<std::string>& symbols,
                                      const std::string& routines) const = 0;
  // A kernel of a built program; it holds the program alive.
  virtual std::shared_ptr<void> kernel(const std::shared_ptr<void>& program,
                                       const std::string& name) const = 0;

  // Device memory, released with the handle (after what is queued on it has run).
  virtual std::shared_ptr<void> allocate(size_t bytes) const = 0;
  // Host to device, queued; `blocking` returns once `src` may be reused, else `src` must live
  // until the queue has finished.
  virtual void write(void* buffer, const void* src, size_t bytes, bool blocking) const = 0;
  // Device to host, queued, and waited for.
  virtual void read(const void* buffer, void* dst, size_t bytes) const = 0;
  // One argument of `kernel`'s next launch: a buffer's handle or a value of `bytes`.
  virtual void set_arg(void* kernel, int index, size_t bytes, const void* value) const = 0;
  // `global` work-items in groups of `local`, queued.
  virtual void launch(void* kernel, size_t global, size_t local) const = 0;
  // Waits for everything queued; throws what the device reported.
  virtual void finish() const = 0;
  // A point in the queue after everything queued so far, released with the handle: wait()
  // returns once the device has run all of that (and throws what the device reported), without
  // waiting for what is queued later.
  virtual std::shared_ptr<void> mark() const = 0;
  virtual void wait(const std::shared_ptr<void>& marker) const = 0;

  // c[i] = a[i] . b[i] for each of `batches` contiguous row-major products (a: m x k, b: k x n,
  // c: m x n), queued, by the device's own library: false where it has none for these dtypes
  // and sizes (the generated routine computes them then).
  virtual bool library_matmul(const void* /*a*/, const void* /*b*/, void* /*c*/,
                              int64_t /*batches*/, int64_t /*m*/, int64_t /*n*/, int64_t /*k*/,
                              DType /*operands*/, DType /*output*/) const {
    return false;
  }
};

}  // namespace lt::backend::offload
