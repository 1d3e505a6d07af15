#include "backend/cuda/cublaslt.h"

#include <dlfcn.h>

#include <string>

#include "backend/dynamic_symbol.h"

namespace lt::backend::cuda {

std::optional<BlasLt> BlasLt::open(std::string* why) {
  std::string tried;
  for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
                           "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so"}) {
    tried += (tried.empty() ? "" : ", ") + std::string(name);
    // Kept loaded for the process: handles and their kernels live in it.
    void* library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) continue;
    BlasLt b;
    if (resolve(library, "cublasLtCreate", b.create) &&
        resolve(library, "cublasLtDestroy", b.destroy) &&
        resolve(library, "cublasLtGetVersion", b.version) &&
        resolve(library, "cublasLtMatmulDescCreate", b.desc_create) &&
        resolve(library, "cublasLtMatmulDescDestroy", b.desc_destroy) &&
        resolve(library, "cublasLtMatrixLayoutCreate", b.layout_create) &&
        resolve(library, "cublasLtMatrixLayoutSetAttribute", b.layout_set) &&
        resolve(library, "cublasLtMatrixLayoutDestroy", b.layout_destroy) &&
        resolve(library, "cublasLtMatmulPreferenceCreate", b.preference_create) &&
        resolve(library, "cublasLtMatmulPreferenceSetAttribute", b.preference_set) &&
        resolve(library, "cublasLtMatmulPreferenceDestroy", b.preference_destroy) &&
        resolve(library, "cublasLtMatmulAlgoGetHeuristic", b.heuristic) &&
        resolve(library, "cublasLtMatmul", b.matmul)) {
      return b;
    }
    dlclose(library);
    tried += " (lacks a call)";
  }
  *why = "no cuBLASLt (tried " + tried + ")";
  return std::nullopt;
}

}  // namespace lt::backend::cuda
