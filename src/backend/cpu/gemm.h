#pragma once
#include <cstdint>

#include "lazytensor/dtype.h"

namespace lt::backend::cpu {

// C = alpha * op(A) * op(B) + beta * C, row-major. op(A) is m x k (A is m x k with row stride
// lda, or k x m when trans_a), op(B) is k x n (B is k x n with row stride ldb, or n x k when
// trans_b); C is m x n with row stride ldc. A and B hold `dtype`, C holds `result`: f32, f64
// or bf16 throughout, or bf16 operands with an f32 result (autocast's products: the f32 sums
// are stored without rounding). bf16 is stored as uint16_t bits and accumulated in f32.
// beta == 0 means C is not read (may hold garbage/NaN). Safe to call from several threads at
// once. Throws lt::Error ("matmul: ...") for other dtypes and for a row stride shorter than
// its row.
void gemm(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
          void* c, int64_t ldc);

// Operands and result of one dtype.
inline void gemm(DType dtype, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                 double alpha, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
                 void* c, int64_t ldc) {
  gemm(dtype, dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// A batch of products of one shape (batched matmul: attention's scores and their gradients).
// Batch dims `sizes[0..rank)`; A's and B's strides over them in elements (0 where the operand
// is broadcast), each matrix laid out as in gemm(); C contiguous, [sizes..., m, n]. alpha 1,
// beta 0. f32 and bf16 batches of more than one product go to oneDNN as one primitive, which
// spreads the batch over its threads (these products are small: one at a time, each spends its
// time starting threads); bf16 operands without a bf16 kernel are widened whole first, up to
// 64 MB of them. Otherwise (f64, no oneDNN, a layout oneDNN refuses, a larger bf16 batch) one
// gemm() per matrix. Throws as gemm().
struct GemmBatch {
  static constexpr int kMaxRank = 6;
  int rank = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
  int64_t count() const;
};
void gemm_batched(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
                  const GemmBatch& batch);

// How many gemm_batched calls went one matrix at a time although oneDNN was there to take them
// (a refused layout, a bf16 batch past the widening bound), since the process started.
int64_t gemm_batched_fallbacks();

// Call on the host before a device thread runs the first product: it builds the libraries'
// state and makes exit() wait for products in flight (tearing the libraries down under a
// running product crashes). Cheap after the first call.
void prepare_gemm();

// "OpenBLAS 0.3.21" or "oneDNN 2.6.3" etc.: the library (and version, read at run time where the
// library reports it) that runs `dtype`.
const char* gemm_library(DType dtype);
// The instructions the products of `dtype` run on: "amx", "avx512_bf16", "avx512", "avx2" or
// "sse4.1" (oneDNN's dispatch, under ONEDNN_MAX_CPU_ISA; OpenBLAS's, by the CPU, for f64 and
// for bf16 widened to f32).
const char* gemm_isa(DType dtype);

}  // namespace lt::backend::cpu
