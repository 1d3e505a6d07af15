#pragma once
// cuBLASLt, the calls used for matrix products on the CUDA device, as a table of function
// pointers: resolved from libcublasLt with dlopen (so nothing needs the toolkit to build or
// run), or filled in by a test's fake. Types are the library's ABI (cublasLt.h): handles and
// descriptors are pointers, statuses ints, data and compute types the enums' values.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace lt::backend::cuda {

constexpr int kCudaR32F = 0, kCudaR64F = 1, kCudaR16F = 2, kCudaR16BF = 14;  // cudaDataType
constexpr int kComputeF32 = 68, kComputeF64 = 70;  // cublasComputeType_t (no TF32)
constexpr int kLayoutBatchCount = 5, kLayoutStridedBatchOffset = 6;
constexpr int kPreferenceMaxWorkspaceBytes = 1;

// cublasLtMatmulHeuristicResult_t.
struct BlasLtHeuristic {
  uint64_t algo[8];  // cublasLtMatmulAlgo_t, opaque
  size_t workspace_bytes;
  int state;
  float waves;
  int reserved[4];
};

struct BlasLt {
  int (*create)(void** handle) = nullptr;
  int (*destroy)(void* handle) = nullptr;
  size_t (*version)() = nullptr;
  int (*desc_create)(void** desc, int compute, int scale_type) = nullptr;
  int (*desc_destroy)(void* desc) = nullptr;
  int (*layout_create)(void** layout, int type, uint64_t rows, uint64_t cols, int64_t ld) = nullptr;
  int (*layout_set)(void* layout, int attribute, const void* value, size_t bytes) = nullptr;
  int (*layout_destroy)(void* layout) = nullptr;
  int (*preference_create)(void** preference) = nullptr;
  int (*preference_set)(void* preference, int attribute, const void* value, size_t bytes) = nullptr;
  int (*preference_destroy)(void* preference) = nullptr;
  int (*heuristic)(void* handle, void* desc, void* a, void* b, void* c, void* d, void* preference,
                   int requested, BlasLtHeuristic* results, int* returned) = nullptr;
  int (*matmul)(void* handle, void* desc, const void* alpha, const void* a, void* a_layout,
                const void* b, void* b_layout, const void* beta, const void* c, void* c_layout,
                void* d, void* d_layout, const void* algo, void* workspace, size_t workspace_bytes,
                void* stream) = nullptr;

  // The toolkit's libcublasLt with every call above, or nullopt with `why` it is not there.
  static std::optional<BlasLt> open(std::string* why);
};

}  // namespace lt::backend::cuda
