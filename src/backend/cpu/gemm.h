#pragma once
#include <cstdint>

#include "lazytensor/dtype.h"

namespace lt::backend::cpu {

// C = alpha * op(A) * op(B) + beta * C, row-major. op(A) is m x k (A is m x k with row stride
// lda, or k x m when trans_a), op(B) is k x n (B is k x n with row stride ldb, or n x k when
// trans_b); C is m x n with row stride ldc. Elements of `dtype` (f32, f64, bf16: bf16 stored as
// uint16_t bits, accumulated in f32). beta == 0 means C is not read (may hold garbage/NaN).
// Safe to call from several threads at once. Throws lt::Error ("matmul: ...") for a dtype
// other than f32, f64 and bf16 and for a row stride shorter than its row.
void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
          const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c,
          int64_t ldc);

// Call on the host before a device thread runs the first product: it builds the libraries'
// state and makes exit() wait for products in flight (tearing the libraries down under a
// running product crashes). Cheap after the first call.
void prepare_gemm();

// "OpenBLAS 0.3.21" or "oneDNN 2.6.3" etc.: the library (and version, read at run time where the
// library reports it) that runs `dtype`.
const char* gemm_library(DType dtype);

}  // namespace lt::backend::cpu
