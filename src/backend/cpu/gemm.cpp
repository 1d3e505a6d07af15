#include "backend/cpu/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lazytensor/error.h"

#ifdef LT_HAVE_ONEDNN
#include <array>
#include <dnnl.hpp>
#include <unordered_map>
#include <unordered_set>
#endif

namespace lt::backend::cpu {

namespace {

// The wrapper is also built without the library (bench/gemm_benchmark.cpp), so it names the
// dtypes it rejects itself instead of calling dtype_name.
const char* unsupported_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
    case DType::u8:
      return "u8";
    default:
      return "unknown";
  }
}

[[noreturn]] void throw_unsupported(DType dtype) {
  throw Error(std::string("matmul: no matrix multiply for dtype ") + unsupported_dtype_name(dtype) +
              " (supported: f32, f64, bf16)");
}

bool supported(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::bf16;
}

const char* supported_dtype_name(DType dtype) {
  return dtype == DType::f32 ? "f32" : dtype == DType::f64 ? "f64" : "bf16";
}

size_t element_bytes(DType dtype) {
  return dtype == DType::f64 ? 8 : dtype == DType::f32 ? 4 : 2;
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even, as the engine's bf16 kernels do; a NaN stays a (quiet) NaN instead of
// rounding up into an infinity.
uint16_t f32_to_bf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// C = beta * C for k == 0, where no library is called: BLAS leaves that case to beta alone,
// and beta == 0 must clear C without reading it.
template <class T, class Load, class Store>
void scale_c(int64_t m, int64_t n, double beta, T* c, int64_t ldc, Load load, Store store) {
  for (int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) row[j] = beta == 0 ? store(0) : store(beta * load(row[j]));
  }
}

void scale_c(DType dtype, int64_t m, int64_t n, double beta, void* c, int64_t ldc) {
  const auto same = [](auto x) { return x; };
  switch (dtype) {
    case DType::f32:
      scale_c(m, n, beta, static_cast<float*>(c), ldc, same,
              [](double x) { return static_cast<float>(x); });
      return;
    case DType::f64:
      scale_c(m, n, beta, static_cast<double*>(c), ldc, same, same);
      return;
    case DType::bf16:
      // The product is computed in f32, as the multiply itself would.
      scale_c(m, n, static_cast<float>(beta), static_cast<uint16_t*>(c), ldc, bf16_to_f32,
              [](double x) { return f32_to_bf16(static_cast<float>(x)); });
      return;
    default:
      throw_unsupported(dtype);
  }
}

// OpenBLAS is built with 32-bit indices (blasint is int).
int blas_int(int64_t value, const char* what) {
  if (value > INT_MAX) {
    throw Error(std::string("matmul: ") + what + " = " + std::to_string(value) +
                " is beyond OpenBLAS's 32-bit indices");
  }
  return static_cast<int>(value);
}

struct BlasArgs {
  CBLAS_TRANSPOSE trans_a, trans_b;
  int m, n, k, lda, ldb, ldc;
};

BlasArgs blas_args(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
                   int64_t ldb, int64_t ldc) {
  return {trans_a ? CblasTrans : CblasNoTrans,
          trans_b ? CblasTrans : CblasNoTrans,
          blas_int(m, "m"),
          blas_int(n, "n"),
          blas_int(k, "k"),
          blas_int(lda, "lda"),
          blas_int(ldb, "ldb"),
          blas_int(ldc, "ldc")};
}

void openblas_sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, double beta, float* c,
                    int64_t ldc) {
  const BlasArgs p = blas_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  cblas_sgemm(CblasRowMajor, p.trans_a, p.trans_b, p.m, p.n, p.k, static_cast<float>(alpha), a,
              p.lda, b, p.ldb, static_cast<float>(beta), c, p.ldc);
}

// A bf16 multiply without a bf16 kernel: sgemm over f32 copies of the operands, block by block
// (at most kBlock rows and columns of C and kDepth of the sums per call), the f32 sums stored
// as `result` (bf16: rounded once, after the last block of sums; f32: accumulated in C). The
// blocks' copies live in per-thread buffers (up to 8 MB, kept for the thread's life: the
// device stream's thread calls this every step) reused by every call: widening whole
// operands allocated and zeroed 125 MB for the MLM decoder's input gradient (1024 x 30522) and
// took longer than its sgemm.
void bf16_via_sgemm(DType result, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    double alpha, const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                    double beta, void* c, int64_t ldc) {
  constexpr int64_t kBlock = 1024, kDepth = 512;
  thread_local std::vector<float> a32, b32, c32;
  // rows x cols of `src` (row stride ld) into a dense f32 buffer.
  const auto widen = [](const uint16_t* src, int64_t rows, int64_t cols, int64_t ld,
                        std::vector<float>& dense) {
    dense.resize(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) dense[i * cols + j] = bf16_to_f32(src[i * ld + j]);
    }
  };
  uint16_t* c16 = static_cast<uint16_t*>(c);
  for (int64_t i0 = 0; i0 < m; i0 += kBlock) {
    const int64_t mb = std::min(kBlock, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
      const int64_t nb = std::min(kBlock, n - j0);
      // Where this block's sums go: C itself (f32), or an f32 copy of C's block (bf16).
      float* sums = nullptr;
      int64_t ld_sums = ldc;
      if (result == DType::bf16) {
        c32.assign(static_cast<size_t>(mb * nb), 0.0f);
        if (beta != 0) widen(c16 + i0 * ldc + j0, mb, nb, ldc, c32);
        sums = c32.data();
        ld_sums = nb;
      } else {
        sums = static_cast<float*>(c) + i0 * ldc + j0;
      }
      for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
        const int64_t kb = std::min(kDepth, k - p0);
        if (trans_a) {
          widen(a + p0 * lda + i0, kb, mb, lda, a32);
        } else {
          widen(a + i0 * lda + p0, mb, kb, lda, a32);
        }
        if (trans_b) {
          widen(b + j0 * ldb + p0, nb, kb, ldb, b32);
        } else {
          widen(b + p0 * ldb + j0, kb, nb, ldb, b32);
        }
        openblas_sgemm(trans_a, trans_b, mb, nb, kb, alpha, a32.data(), trans_a ? mb : kb,
                       b32.data(), trans_b ? kb : nb, p0 == 0 ? beta : 1.0, sums, ld_sums);
      }
      if (result == DType::bf16) {
        for (int64_t i = 0; i < mb; ++i) {
          for (int64_t j = 0; j < nb; ++j) {
            c16[(i0 + i) * ldc + j0 + j] = f32_to_bf16(c32[i * nb + j]);
          }
        }
      }
    }
  }
}

// "OpenBLAS 0.3.21" from the configuration string of the library actually loaded
// ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..."), which may differ from the headers built against.
const char* openblas_name() {
  static const std::string name = [] {
    const std::string config = openblas_get_config();
    const size_t version_end = config.find(' ', config.find(' ') + 1);
    return config.substr(0, version_end);
  }();
  return name.c_str();
}

#ifdef LT_HAVE_ONEDNN

// Never destroyed: the device threads' streams and primitives (thread_local) may outlive static
// destruction at exit, and must not find their engine gone.
const dnnl::engine& onednn_engine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Everything that decides a matmul primitive. alpha and beta are compiled into it (output
// scale and sum post-op), as they are constant at almost every call site.
struct MatmulKey {
  DType dtype, result;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  uint64_t alpha_bits, beta_bits;  // bits, so that a NaN alpha still finds its entry
  // Batched products (C contiguous over the batch); rank 0 for one product.
  int batch_rank = 0;
  std::array<int64_t, GemmBatch::kMaxRank> batch{}, a_batch{}, b_batch{};
  bool operator==(const MatmulKey&) const = default;
};

struct MatmulKeyHash {
  size_t operator()(const MatmulKey& key) const {
    size_t hash = (static_cast<size_t>(key.dtype) * 16 + static_cast<size_t>(key.result)) * 4 +
                  key.trans_a * 2 + key.trans_b;
    for (uint64_t field :
         {static_cast<uint64_t>(key.m), static_cast<uint64_t>(key.n), static_cast<uint64_t>(key.k),
          static_cast<uint64_t>(key.lda), static_cast<uint64_t>(key.ldb),
          static_cast<uint64_t>(key.ldc), key.alpha_bits, key.beta_bits}) {
      hash = (hash ^ field) * 0x100000001b3ull;
    }
    for (int d = 0; d < key.batch_rank; ++d) {
      for (int64_t field : {key.batch[d], key.a_batch[d], key.b_batch[d]}) {
        hash = (hash ^ static_cast<uint64_t>(field)) * 0x100000001b3ull;
      }
    }
    return hash;
  }
};

struct Matmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;  // the operands as the caller holds them
  // Operands the primitive reads in another layout (packed_layouts()): copied into it first.
  std::optional<dnnl::reorder> pack_a, pack_b;
  dnnl::memory::desc packed_a, packed_b;
};

// Each thread has its own stream and its own primitives, so calls from several threads share
// nothing but the engine and oneDNN's (thread-safe) global primitive cache, which makes a
// primitive another thread already built cheap to build again. A lookup here also skips
// creating the primitive descriptor that oneDNN's cache is keyed on: about 3 us a call with
// 2.6.3, twice the whole call of a small (8x8x8) product.
struct OnednnThreadState {
  // Bounds the memory of a thread that sees ever new shapes; starting over costs one
  // primitive creation per shape, mostly served by oneDNN's own cache.
  static constexpr size_t kMaxPrimitives = 256;
  dnnl::stream stream{onednn_engine()};
  std::unordered_map<MatmulKey, Matmul, MatmulKeyHash> primitives;
  // Keys oneDNN has no primitive for (a batch layout it refuses): tried once per thread.
  std::unordered_set<MatmulKey, MatmulKeyHash> refused;
  // The packed copies of operands (Matmul::pack_a, pack_b), kept between calls up to
  // kKeptPackedBytes each.
  std::vector<std::byte> packed_a, packed_b;
};

OnednnThreadState& onednn_thread_state() {
  thread_local OnednnThreadState state;
  return state;
}

dnnl::memory::data_type onednn_type(DType dtype) {
  return dtype == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Whether an f32 product runs on operands copied into the layouts oneDNN prefers (A plain,
// B in the primitive's own blocked layout) rather than as they lie. oneDNN 2.6's f32 kernels
// read a plain B (dX = dY W) or a transposed A (dW = dY^T X) slowly when C is wide: on an
// Intel Xeon (AVX-512), BERT-base's feed-forward products with n = 3072 ran at 106-140 GFLOP/s
// as they lay and 255-305 with the copies included (bench/gemm_benchmark, the oneDNN and
// wrapper columns). Narrower products (n = 768, and the MLM decoder's dX and dW) lose 4-28% to
// the copies, so they run as they lie. A fixed rule, not a timing, so that a product always
// runs the same way (and rounds the same).
bool packed_layouts(const MatmulKey& key) {
  return key.dtype == DType::f32 && key.batch_rank == 0 && (key.trans_a || !key.trans_b) &&
         key.n >= 2048;
}

Matmul make_matmul(const MatmulKey& key) {
  // One creation at a time: oneDNN's cache is thread-safe, but its locking is not visible to
  // ThreadSanitizer (the library is not instrumented), and creations are rare.
  static std::mutex creation;
  const std::lock_guard<std::mutex> lock(creation);
  using dims = dnnl::memory::dims;
  const dnnl::memory::data_type type = onednn_type(key.dtype);
  const dnnl::memory::data_type result_type = onednn_type(key.result);
  // A transposed operand is the same memory read with its strides swapped. Batch dims lead;
  // an operand broadcast over one has size 1 there (any stride).
  // A broadcast dim gets the operand's footprint as its stride, past every other dim, so that
  // the layout reads as plain (not overlapping) whatever order oneDNN sorts the dims in.
  const auto footprint = [&](const std::array<int64_t, GemmBatch::kMaxRank>& strides, int64_t rows,
                             int64_t cols, int64_t ld) {
    int64_t extent = rows * ld + cols;
    for (int d = 0; d < key.batch_rank; ++d) {
      extent = std::max(extent, strides[d] * key.batch[d]);
    }
    return extent;
  };
  const int64_t a_extent =
      footprint(key.a_batch, key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k, key.lda);
  const int64_t b_extent =
      footprint(key.b_batch, key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n, key.ldb);
  dims a_sizes, a_strides, b_sizes, b_strides, c_sizes, c_strides;
  for (int d = 0; d < key.batch_rank; ++d) {
    a_sizes.push_back(key.a_batch[d] == 0 ? 1 : key.batch[d]);
    a_strides.push_back(key.a_batch[d] == 0 ? a_extent : key.a_batch[d]);
    b_sizes.push_back(key.b_batch[d] == 0 ? 1 : key.batch[d]);
    b_strides.push_back(key.b_batch[d] == 0 ? b_extent : key.b_batch[d]);
    c_sizes.push_back(key.batch[d]);
  }
  a_sizes.insert(a_sizes.end(), {key.m, key.k});
  b_sizes.insert(b_sizes.end(), {key.k, key.n});
  c_sizes.insert(c_sizes.end(), {key.m, key.n});
  a_strides.insert(a_strides.end(), {key.trans_a ? 1 : key.lda, key.trans_a ? key.lda : 1});
  b_strides.insert(b_strides.end(), {key.trans_b ? 1 : key.ldb, key.trans_b ? key.ldb : 1});
  c_strides.resize(c_sizes.size());
  c_strides.back() = 1;
  c_strides[c_sizes.size() - 2] = key.ldc;
  for (int d = key.batch_rank - 1; d >= 0; --d) c_strides[d] = c_strides[d + 1] * c_sizes[d + 1];
  const dnnl::memory::desc a(a_sizes, type, a_strides);
  const dnnl::memory::desc b(b_sizes, type, b_strides);
  const dnnl::memory::desc c(c_sizes, result_type, c_strides);
  dnnl::primitive_attr attr;
  const float alpha = static_cast<float>(std::bit_cast<double>(key.alpha_bits));
  const float beta = static_cast<float>(std::bit_cast<double>(key.beta_bits));
  if (alpha != 1) attr.set_output_scales(0, {alpha});
  if (beta != 0) {
    dnnl::post_ops post_ops;
    post_ops.append_sum(beta);
    attr.set_post_ops(post_ops);
  }
  if (!packed_layouts(key)) {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, onednn_engine());
    return {dnnl::matmul(pd), a, b, c, std::nullopt, std::nullopt, {}, {}};
  }
  using tag = dnnl::memory::format_tag;
  const dnnl::memory::desc plain_a({key.m, key.k}, type, tag::ab);
  const dnnl::memory::desc any_b({key.k, key.n}, type, tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plain_a, any_b, c), attr,
                                        onednn_engine());
  Matmul matmul{dnnl::matmul(pd), a, b, c, std::nullopt, std::nullopt, pd.src_desc(),
                pd.weights_desc()};
  const auto pack = [&](const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
    return std::optional<dnnl::reorder>(
        dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to)));
  };
  if (matmul.packed_a != a) matmul.pack_a = pack(a, matmul.packed_a);
  if (matmul.packed_b != b) matmul.pack_b = pack(b, matmul.packed_b);
  return matmul;
}

// This thread's primitive for `key`, made on first use; nullptr where oneDNN has none.
const Matmul* primitive_for(const MatmulKey& key) {
  OnednnThreadState& state = onednn_thread_state();
  if (auto it = state.primitives.find(key); it != state.primitives.end()) return &it->second;
  if (state.refused.contains(key)) return nullptr;
  if (state.primitives.size() >= OnednnThreadState::kMaxPrimitives) state.primitives.clear();
  try {
    return &state.primitives.emplace(key, make_matmul(key)).first->second;
  } catch (const dnnl::error&) {
    if (state.refused.size() >= OnednnThreadState::kMaxPrimitives) state.refused.clear();
    state.refused.insert(key);
    return nullptr;
  }
}

// `operand` as the primitive reads it: itself, or its copy in the packed layout (in `buffer`).
dnnl::memory operand(const std::optional<dnnl::reorder>& pack, const dnnl::memory::desc& given,
                     const dnnl::memory::desc& packed, const void* data,
                     std::vector<std::byte>& buffer) {
  const dnnl::engine& engine = onednn_engine();
  // oneDNN reads the sources through non-const handles but does not write them.
  dnnl::memory as_given(given, engine, const_cast<void*>(data));
  if (!pack) return as_given;
  buffer.resize(packed.get_size());
  dnnl::memory copy(packed, engine, buffer.data());
  pack->execute(onednn_thread_state().stream, as_given, copy);
  return copy;
}

void execute(const Matmul& matmul, const void* a, const void* b, void* c) {
  OnednnThreadState& state = onednn_thread_state();
  matmul.primitive.execute(
      state.stream,
      {{DNNL_ARG_SRC, operand(matmul.pack_a, matmul.a, matmul.packed_a, a, state.packed_a)},
       {DNNL_ARG_WEIGHTS, operand(matmul.pack_b, matmul.b, matmul.packed_b, b, state.packed_b)},
       {DNNL_ARG_DST, dnnl::memory(matmul.c, onednn_engine(), c)}});
  state.stream.wait();
  // A copy of a very large operand would otherwise stay with the thread until it exits.
  constexpr size_t kKeptPackedBytes = size_t{64} << 20;
  for (std::vector<std::byte>* buffer : {&state.packed_a, &state.packed_b}) {
    if (buffer->capacity() > kKeptPackedBytes) std::vector<std::byte>().swap(*buffer);
  }
}

// Runs `key`'s primitive; false where oneDNN made a primitive it then cannot run (oneDNN 2.6
// does for some batched layouts whose batch stride is below a matrix's extent, such as
// attention heads of 6 elements): the key is refused from then on, and the caller computes the
// product another way (it overwrites c, whatever the failed run left there).
bool run(const MatmulKey& key, const Matmul& matmul, const void* a, const void* b, void* c) {
  try {
    execute(matmul, a, b, c);
    return true;
  } catch (const dnnl::error&) {
    OnednnThreadState& state = onednn_thread_state();
    state.primitives.erase(key);
    state.refused.insert(key);
    return false;
  }
}

// False (nothing written) where oneDNN has no primitive for the product.
bool onednn_gemm(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, double alpha, const void* a, int64_t lda, const void* b, int64_t ldb,
                 double beta, void* c, int64_t ldc) {
  const uint64_t alpha_bits = std::bit_cast<uint64_t>(alpha);
  const uint64_t beta_bits = std::bit_cast<uint64_t>(beta);
  const MatmulKey key{dtype, result, trans_a, trans_b, m,          n,
                      k,     lda,    ldb,     ldc,     alpha_bits, beta_bits};
  const Matmul* matmul = primitive_for(key);
  return matmul != nullptr && run(key, *matmul, a, b, c);
}

// oneDNN's bf16 matmul needs AVX512 (avx512_core) or newer; elsewhere (or below
// ONEDNN_MAX_CPU_ISA) it has none, and bf16 goes through sgemm. Asked per result dtype (bf16
// or f32): a build could have one without the other.
bool onednn_has_bf16_matmul(DType result) {
  const auto probe = [](DType into) {
    try {
      make_matmul({DType::bf16, into, false, false, 1, 1, 1, 1, 1, 1, std::bit_cast<uint64_t>(1.0),
                   std::bit_cast<uint64_t>(0.0)});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool into_bf16 = probe(DType::bf16), into_f32 = probe(DType::f32);
  return result == DType::f32 ? into_f32 : into_bf16;
}

const char* onednn_name() {
  static const std::string name = [] {
    const dnnl_version_t* version = dnnl_version();
    return "oneDNN " + std::to_string(version->major) + "." + std::to_string(version->minor) + "." +
           std::to_string(version->patch);
  }();
  return name.c_str();
}

#endif  // LT_HAVE_ONEDNN

// exit() tears down the libraries' statics (oneDNN's primitive cache, OpenBLAS's thread server)
// while a device thread may still be inside a product (a program that ends without waiting for
// its last step). prepare_gemm() builds those statics with a tiny product of each kind, then
// registers a handler, which therefore runs before they die: it waits for the calls in flight,
// and calls that start later park their thread until the process is gone.
std::atomic<int> g_calls_in_flight{0};
// gemm_batched calls that oneDNN could not take whole (gemm_batched_fallbacks()).
std::atomic<int64_t> g_batched_fallbacks{0};
std::atomic<bool> g_exiting{false};

void wait_for_calls_at_exit() {
  g_exiting = true;
  while (g_calls_in_flight.load() > 0) std::this_thread::yield();
}

class CallInFlight {
 public:
  CallInFlight() {
    ++g_calls_in_flight;
    if (g_exiting) {
      --g_calls_in_flight;
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  ~CallInFlight() { --g_calls_in_flight; }
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;
};

void check_stride(int64_t ld, int64_t row, const char* name) {
  if (ld < row) {
    throw Error(std::string("matmul: ") + name + " = " + std::to_string(ld) +
                " is shorter than its row of " + std::to_string(row) + " elements");
  }
}

void check_arguments(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n,
                     int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  if (!supported(dtype)) throw_unsupported(dtype);
  if (!supported(result)) throw_unsupported(result);
  if (result != dtype && !(dtype == DType::bf16 && result == DType::f32)) {
    throw Error(std::string("matmul: no matrix multiply of ") + supported_dtype_name(dtype) +
                " operands into a " + supported_dtype_name(result) +
                " result (mixed: bf16 operands, f32 result)");
  }
  if (m < 0 || n < 0 || k < 0) {
    throw Error("matmul: negative size m = " + std::to_string(m) + ", n = " + std::to_string(n) +
                ", k = " + std::to_string(k));
  }
  check_stride(lda, trans_a ? m : k, "lda");
  check_stride(ldb, trans_b ? k : n, "ldb");
  check_stride(ldc, n, "ldc");
}

// Calls body(a_offset, b_offset, p) for matrix p of the batch (offsets in elements), in order.
template <class Body>
void for_each_matrix(const GemmBatch& batch, Body body) {
  int64_t index[GemmBatch::kMaxRank] = {};
  const int64_t count = batch.count();
  for (int64_t p = 0; p < count; ++p) {
    int64_t at_a = 0, at_b = 0;
    for (int d = 0; d < batch.rank; ++d) {
      at_a += index[d] * batch.a_strides[d];
      at_b += index[d] * batch.b_strides[d];
    }
    body(at_a, at_b, p);
    for (int d = batch.rank - 1; d >= 0; --d) {
      if (++index[d] < batch.sizes[d]) break;
      index[d] = 0;
    }
  }
}

#ifdef LT_HAVE_ONEDNN
// The matrices of one batched bf16 operand (`rows` x `cols` as stored, row stride ld, batch
// strides `strides`) widened into dense f32 ones, one per index over the dims it is not
// broadcast over; `dense_strides` gets their batch strides (0 where broadcast).
// The batch strides of an operand's dense copy (0 where broadcast); returns its elements.
int64_t dense_layout(int64_t rows, int64_t cols, const GemmBatch& batch, const int64_t* strides,
                     int64_t* dense_strides) {
  int64_t size = rows * cols;
  for (int d = batch.rank - 1; d >= 0; --d) {
    dense_strides[d] = strides[d] == 0 ? 0 : size;
    if (strides[d] != 0) size *= batch.sizes[d];
  }
  return size;
}

void widen_batched(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld,
                   const GemmBatch& batch, const int64_t* strides, std::vector<float>& dense) {
  int64_t dense_strides[GemmBatch::kMaxRank];
  dense.resize(static_cast<size_t>(dense_layout(rows, cols, batch, strides, dense_strides)));
  GemmBatch own = batch;  // walks src (a_strides) and dense (b_strides) together
  std::copy(strides, strides + batch.rank, own.a_strides);
  std::copy(dense_strides, dense_strides + batch.rank, own.b_strides);
  for (int d = 0; d < batch.rank; ++d) {
    if (strides[d] == 0) own.sizes[d] = 1;
  }
  for_each_matrix(own, [&](int64_t from, int64_t to, int64_t) {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        dense[to + i * cols + j] = bf16_to_f32(src[from + i * ld + j]);
      }
    }
  });
}
#endif

}  // namespace

int64_t gemm_batched_fallbacks() {
  return g_batched_fallbacks.load(std::memory_order_relaxed);
}

int64_t GemmBatch::count() const {
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) count *= sizes[d];
  return count;
}

void gemm(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          double alpha, const void* a, int64_t lda, const void* b, int64_t ldb, double beta,
          void* c, int64_t ldc) {
  check_arguments(dtype, result, trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(result, m, n, beta, c, ldc);
    return;
  }
  const CallInFlight in_flight;
  switch (dtype) {
    case DType::f64: {
      const BlasArgs p = blas_args(trans_a, trans_b, m, n, k, lda, ldb, ldc);
      cblas_dgemm(CblasRowMajor, p.trans_a, p.trans_b, p.m, p.n, p.k, alpha,
                  static_cast<const double*>(a), p.lda, static_cast<const double*>(b), p.ldb, beta,
                  static_cast<double*>(c), p.ldc);
      return;
    }
    case DType::f32:
#ifdef LT_HAVE_ONEDNN
      if (onednn_gemm(dtype, dtype, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                      ldc)) {
        return;
      }
#endif
      openblas_sgemm(trans_a, trans_b, m, n, k, alpha, static_cast<const float*>(a), lda,
                     static_cast<const float*>(b), ldb, beta, static_cast<float*>(c), ldc);
      return;
    default:  // bf16
#ifdef LT_HAVE_ONEDNN
      if (onednn_has_bf16_matmul(result) && onednn_gemm(dtype, result, trans_a, trans_b, m, n, k,
                                                        alpha, a, lda, b, ldb, beta, c, ldc)) {
        return;
      }
#endif
      bf16_via_sgemm(result, trans_a, trans_b, m, n, k, alpha, static_cast<const uint16_t*>(a), lda,
                     static_cast<const uint16_t*>(b), ldb, beta, c, ldc);
      return;
  }
}

void gemm_batched(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m, int64_t n,
                  int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb, void* c,
                  const GemmBatch& batch) {
  check_arguments(dtype, result, trans_a, trans_b, m, n, k, lda, ldb, n);
  if (batch.rank < 0 || batch.rank > GemmBatch::kMaxRank) {
    throw Error("matmul: " + std::to_string(batch.rank) + " batch dims, at most " +
                std::to_string(GemmBatch::kMaxRank));
  }
  const int64_t count = batch.count();
  if (count == 0 || m == 0 || n == 0) return;
  const size_t esize = element_bytes(dtype), result_esize = element_bytes(result);
#ifdef LT_HAVE_ONEDNN
  if (dtype != DType::f64 && k > 0 && count > 1) {
    const CallInFlight in_flight;
    MatmulKey key{dtype,
                  result,
                  trans_a,
                  trans_b,
                  m,
                  n,
                  k,
                  lda,
                  ldb,
                  n,
                  std::bit_cast<uint64_t>(1.0),
                  std::bit_cast<uint64_t>(0.0)};
    key.batch_rank = batch.rank;
    std::copy(batch.sizes, batch.sizes + batch.rank, key.batch.begin());
    std::copy(batch.a_strides, batch.a_strides + batch.rank, key.a_batch.begin());
    std::copy(batch.b_strides, batch.b_strides + batch.rank, key.b_batch.begin());
    if (dtype == DType::f32 || onednn_has_bf16_matmul(result)) {
      const Matmul* matmul = primitive_for(key);
      if (matmul != nullptr && run(key, *matmul, a, b, c)) return;
    } else {
      // bf16 operands without a bf16 kernel: the batch widened into dense f32 copies, then one
      // f32 primitive; up to kMaxWidened floats in all (attention's operands are a few MB),
      // larger batches one matrix at a time (each gemm() widens block by block).
      constexpr int64_t kMaxWidened = int64_t{16} << 20;
      const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
      const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
      const int64_t a_size =
          dense_layout(a_rows, a_cols, batch, batch.a_strides, key.a_batch.data());
      const int64_t b_size =
          dense_layout(b_rows, b_cols, batch, batch.b_strides, key.b_batch.data());
      const int64_t c_size = result == DType::bf16 ? count * m * n : 0;
      key.dtype = key.result = DType::f32;
      key.lda = a_cols;
      key.ldb = b_cols;
      const Matmul* matmul = a_size + b_size + c_size <= kMaxWidened ? primitive_for(key) : nullptr;
      if (matmul != nullptr) {
        // Per thread, kept between calls up to kKeptFloats each.
        thread_local std::vector<float> a32, b32, c32;
        widen_batched(static_cast<const uint16_t*>(a), a_rows, a_cols, lda, batch, batch.a_strides,
                      a32);
        widen_batched(static_cast<const uint16_t*>(b), b_rows, b_cols, ldb, batch, batch.b_strides,
                      b32);
        float* sums = static_cast<float*>(c);
        if (result == DType::bf16) {
          c32.resize(static_cast<size_t>(c_size));
          sums = c32.data();
        }
        execute(*matmul, a32.data(), b32.data(), sums);
        for (int64_t i = 0; i < c_size; ++i) static_cast<uint16_t*>(c)[i] = f32_to_bf16(sums[i]);
        constexpr size_t kKeptFloats = size_t{4} << 20;
        for (std::vector<float>* buffer : {&a32, &b32, &c32}) {
          if (buffer->capacity() > kKeptFloats) std::vector<float>().swap(*buffer);
        }
        return;
      }
    }
    g_batched_fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
#endif
  const char* a_bytes = static_cast<const char*>(a);
  const char* b_bytes = static_cast<const char*>(b);
  char* c_bytes = static_cast<char*>(c);
  for_each_matrix(batch, [&](int64_t at_a, int64_t at_b, int64_t p) {
    gemm(dtype, result, trans_a, trans_b, m, n, k, 1.0, a_bytes + at_a * esize, lda,
         b_bytes + at_b * esize, ldb, 0.0, c_bytes + p * m * n * result_esize, n);
  });
}

void prepare_gemm() {
  static std::once_flag prepared;
  std::call_once(prepared, [] {
    float f32[3] = {1, 1, 0};
    double f64[3] = {1, 1, 0};
    gemm(DType::f32, false, false, 1, 1, 1, 1.0, f32, 1, f32 + 1, 1, 0.0, f32 + 2, 1);
    gemm(DType::f64, false, false, 1, 1, 1, 1.0, f64, 1, f64 + 1, 1, 0.0, f64 + 2, 1);
    std::atexit(wait_for_calls_at_exit);
  });
}

const char* gemm_library(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return openblas_name();
    case DType::f32:
#ifdef LT_HAVE_ONEDNN
      return onednn_name();
#else
      return openblas_name();
#endif
    case DType::bf16:
#ifdef LT_HAVE_ONEDNN
      if (onednn_has_bf16_matmul(DType::bf16)) return onednn_name();
#endif
      return openblas_name();
    default:
      throw_unsupported(dtype);
  }
}

const char* gemm_isa(DType dtype) {
  gemm_library(dtype);  // lt::Error for a dtype without products
#ifdef LT_HAVE_ONEDNN
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto has = [&](dnnl_cpu_isa_t bits) {
    return (isa & static_cast<unsigned>(bits)) == static_cast<unsigned>(bits);
  };
  if (dtype == DType::bf16 && onednn_has_bf16_matmul(DType::bf16)) {
    return has(dnnl_cpu_isa_avx512_core_amx)    ? "amx"
           : has(dnnl_cpu_isa_avx512_core_bf16) ? "avx512_bf16"
                                                : "avx512";
  }
  if (dtype == DType::f32) {
    return has(dnnl_cpu_isa_avx512_core) ? "avx512" : has(dnnl_cpu_isa_avx2) ? "avx2" : "sse4.1";
  }
#endif
  // OpenBLAS (f64, and bf16 widened to f32) picks its kernels by the CPU.
  return __builtin_cpu_supports("avx512f") ? "avx512"
         : __builtin_cpu_supports("avx2")  ? "avx2"
                                           : "sse4.1";
}

}  // namespace lt::backend::cpu
