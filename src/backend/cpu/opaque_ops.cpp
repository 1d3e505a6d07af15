#include "backend/cpu/opaque_ops.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/gemm.h"
#include "distributed/process_group.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cpu {

namespace {

const char* element_address(const StridedOperand& x, const std::vector<void*>& slots) {
  return static_cast<const char*>(slots[x.slot]) + x.offset * dtype_size(x.dtype);
}

// Copies the elements of `x` into `dst` in row-major order, whatever its strides.
template <size_t N>
void gather_elements(const StridedOperand& x, const char* src, char* dst) {
  const int rank = x.shape.rank();
  const int64_t total = x.shape.numel();
  if (total == 0) return;
  if (rank == 0) {
    std::memcpy(dst, src, N);
    return;
  }
  int64_t index[Shape::kMaxRank] = {};
  const int64_t inner = x.shape[rank - 1], inner_stride = x.strides[rank - 1];
  int64_t at = 0;
  for (int64_t done = 0; done < total; done += inner) {
    for (int64_t i = 0; i < inner; ++i)
      std::memcpy(dst + (done + i) * N, src + (at + i * inner_stride) * N, N);
    for (int d = rank - 2; d >= 0; --d) {
      at += x.strides[d];
      if (++index[d] < x.shape[d]) break;
      at -= index[d] * x.strides[d];
      index[d] = 0;
    }
  }
}

void gather_contiguous(const StridedOperand& x, const char* src, char* dst) {
  switch (dtype_size(x.dtype)) {
    case 1:
      return gather_elements<1>(x, src, dst);
    case 2:
      return gather_elements<2>(x, src, dst);
    case 4:
      return gather_elements<4>(x, src, dst);
    default:
      return gather_elements<8>(x, src, dst);
  }
}

// An operand in contiguous memory: its own storage when it is laid out so, else a copy.
class ContiguousOperand {
 public:
  ContiguousOperand(const StridedOperand& x, const std::vector<void*>& slots) {
    const char* src = element_address(x, slots);
    if (is_contiguous(x)) {
      data_ = src;
      return;
    }
    copy_.reset(new char[x.shape.numel() * dtype_size(x.dtype)]);
    gather_contiguous(x, src, copy_.get());
    data_ = copy_.get();
  }
  const char* data() const { return data_; }

 private:
  std::unique_ptr<char[]> copy_;
  const char* data_ = nullptr;
};

// The ids of an index op (a 1-D integer operand), checked against the indexed dim's size
// before anything is written; `ignore` (cross_entropy's ignore_index) passes too.
std::vector<int64_t> read_ids(const StridedOperand& ids, const std::vector<void*>& slots,
                              const char* op, int dim, int64_t size,
                              std::optional<int64_t> ignore = std::nullopt) {
  const int64_t count = ids.shape.numel();
  std::vector<int64_t> out(count);
  const char* base = element_address(ids, slots);
  const int64_t stride = ids.shape.rank() == 0 ? 0 : ids.strides[0];
  for (int64_t j = 0; j < count; ++j) {
    const char* at = base + j * stride * dtype_size(ids.dtype);
    int64_t id;
    if (ids.dtype == DType::i64) {
      std::memcpy(&id, at, 8);
    } else {
      int32_t narrow;
      std::memcpy(&narrow, at, 4);
      id = narrow;
    }
    if ((id < 0 || id >= size) && id != ignore)
      throw_index_out_of_range(op, dim, size, id, j, ignore);
    out[j] = id;
  }
  return out;
}

// Splits [0, count) between the pool's workers in chunks.
template <class F>
void parallel_for(ThreadPool& pool, int64_t count, int64_t chunk, F&& body) {
  if (count <= chunk) {
    if (count > 0) body(0, count);
    return;
  }
  std::atomic<int64_t> next{0};
  pool.run([&](int) {
    for (int64_t begin; (begin = next.fetch_add(chunk)) < count;) {
      body(begin, std::min(count, begin + chunk));
    }
  });
}

// One matrix of a batched product as BLAS reads it: row-major, or transposed, with a leading
// dimension; or neither, when it must be copied first.
struct MatrixLayout {
  bool usable = false;
  bool trans = false;
  int64_t ld = 0;
};

MatrixLayout classify(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(cols, 1))) {
    return {true, false, rows == 1 ? std::max<int64_t>(cols, 1) : row_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(rows, 1))) {
    return {true, true, cols == 1 ? std::max<int64_t>(rows, 1) : col_stride};
  }
  return {};
}

// A library product as the timeline names it (a span of category "gemm" inside its launch,
// without the operand copies the launch may make first): every argument the call takes but the
// data, so that bench/gemm_replay_benchmark can make the same call again alone.
std::string describe_gemm_call(DType dtype, DType result, bool trans_a, bool trans_b, int64_t m,
                               int64_t n, int64_t k, int64_t lda, int64_t ldb,
                               const GemmBatch* batch) {
  std::string text = std::string("dtype=") + dtype_name(dtype) + " result=" + dtype_name(result) +
                     " trans_a=" + (trans_a ? "1" : "0") + " trans_b=" + (trans_b ? "1" : "0") +
                     " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                     " k=" + std::to_string(k) + " lda=" + std::to_string(lda) +
                     " ldb=" + std::to_string(ldb);
  if (batch == nullptr) return text;
  auto list = [&](const int64_t* values) {
    std::string joined;
    for (int d = 0; d < batch->rank; ++d) {
      joined += (d == 0 ? "" : ",") + std::to_string(values[d]);
    }
    return joined;
  };
  return text + " batch=" + list(batch->sizes) + " a_strides=" + list(batch->a_strides) +
         " b_strides=" + list(batch->b_strides);
}

void run_matmul(const OpaqueOp& op, const std::vector<void*>& slots) {
  StridedOperand a = op.operands[0], b = op.operands[1];
  const int ra = a.shape.rank(), rb = b.shape.rank(), rc = op.output_shape.rank();
  const int64_t m = a.shape[ra - 2], k = a.shape[ra - 1], n = b.shape[rb - 1];
  // The operands share a dtype; the result's may be wider (bf16 products with f32 results).
  const DType operand_dtype = a.dtype;
  const size_t esize = dtype_size(operand_dtype);
  char* c = static_cast<char*>(slots[op.output_slot]);
  // Operands BLAS cannot read in place (a view with both matrix strides > 1) are copied.
  std::unique_ptr<char[]> a_copy, b_copy;
  auto layout_of = [&](StridedOperand& x, int r, std::unique_ptr<char[]>& copy) {
    MatrixLayout layout =
        classify(x.shape[r - 2], x.shape[r - 1], x.strides[r - 2], x.strides[r - 1]);
    if (layout.usable) return layout;
    copy.reset(new char[x.shape.numel() * esize]);
    gather_contiguous(x, element_address(x, slots), copy.get());
    x.offset = 0;
    contiguous_strides(x.shape, x.strides);
    return classify(x.shape[r - 2], x.shape[r - 1], x.strides[r - 2], x.strides[r - 1]);
  };
  const MatrixLayout la = layout_of(a, ra, a_copy);
  const MatrixLayout lb = layout_of(b, rb, b_copy);
  const char* a_base = a_copy ? a_copy.get() : element_address(a, slots);
  const char* b_base = b_copy ? b_copy.get() : element_address(b, slots);

  // Batch strides over the output's batch dims (0 where an operand is broadcast).
  const int nbatch = rc - 2;
  int64_t sa[Shape::kMaxRank] = {}, sb[Shape::kMaxRank] = {};
  for (int d = 0; d < nbatch; ++d) {
    const int ea = d - (nbatch - (ra - 2)), eb = d - (nbatch - (rb - 2));
    sa[d] = (ea < 0 || a.shape[ea] == 1) ? 0 : a.strides[ea];
    sb[d] = (eb < 0 || b.shape[eb] == 1) ? 0 : b.strides[eb];
  }
  int64_t batches = 1;
  for (int d = 0; d < nbatch; ++d) batches *= op.output_shape[d];
  if (batches == 0 || m == 0 || n == 0) return;

  // A batch of row-major A matrices stacked row after row against one B (a linear layer over
  // [batch, seq, hidden]) is a single product with batches * m rows.
  bool stacked =
      !la.trans && batches > 1 && std::all_of(sb, sb + nbatch, [](int64_t s) { return s == 0; });
  int64_t expected = la.ld * m;
  for (int d = nbatch - 1; stacked && d >= 0; --d) {
    if (op.output_shape[d] == 1) continue;
    stacked = sa[d] == expected;
    expected *= op.output_shape[d];
  }
  if (stacked || batches == 1) {
    const int64_t rows = stacked ? batches * m : m;
    const std::string call = profiler::enabled()
                                 ? describe_gemm_call(operand_dtype, op.output_dtype, la.trans,
                                                      lb.trans, rows, n, k, la.ld, lb.ld, nullptr)
                                 : std::string();
    const profiler::Scope span("library product", "gemm", call);
    gemm(operand_dtype, op.output_dtype, la.trans, lb.trans, rows, n, k, 1.0, a_base, la.ld, b_base,
         lb.ld, 0.0, c, n);
    return;
  }
  // The batch dims of size 1 dropped.
  static_assert(GemmBatch::kMaxRank >= Shape::kMaxRank - 2);
  GemmBatch batch;
  for (int d = 0; d < nbatch; ++d) {
    if (op.output_shape[d] == 1) continue;
    batch.sizes[batch.rank] = op.output_shape[d];
    batch.a_strides[batch.rank] = sa[d];
    batch.b_strides[batch.rank] = sb[d];
    ++batch.rank;
  }
  const std::string call = profiler::enabled()
                               ? describe_gemm_call(operand_dtype, op.output_dtype, la.trans,
                                                    lb.trans, m, n, k, la.ld, lb.ld, &batch)
                               : std::string();
  const profiler::Scope span("library product", "gemm", call);
  gemm_batched(operand_dtype, op.output_dtype, la.trans, lb.trans, m, n, k, a_base, la.ld, b_base,
               lb.ld, c, batch);
}

void run_index_select(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool) {
  const StridedOperand& table = op.operands[0];
  const IndexGeometry g = geometry(table.shape, static_cast<int>(op.attrs[0]));
  const std::vector<int64_t> ids =
      read_ids(op.operands[1], slots, "index_select (embedding)", g.dim, g.rows);
  const ContiguousOperand source(table, slots);
  const size_t row_bytes = g.inner * dtype_size(table.dtype);
  const int64_t count = static_cast<int64_t>(ids.size());
  char* out = static_cast<char*>(slots[op.output_slot]);
  parallel_for(pool, g.outer * count, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t o = r / count, j = r % count;
      std::memcpy(out + r * row_bytes, source.data() + (o * g.rows + ids[j]) * row_bytes,
                  row_bytes);
    }
  });
}

// Sums in the dtype's register type (f32 for bf16), rows added in id order: deterministic.
// The zero fill, most of the work for an embedding table's gradient, is split between workers;
// where registers are the storage type the rows are added in place.
template <class T>
void index_add_rows(const IndexGeometry& g, const std::vector<int64_t>& ids, const T* source,
                    T* out, ThreadPool& pool) {
  using R = RegisterOf<T>;
  const int64_t count = static_cast<int64_t>(ids.size());
  const int64_t total = g.outer * g.rows * g.inner;
  std::unique_ptr<R[]> wide;
  R* acc = reinterpret_cast<R*>(out);
  if constexpr (!std::is_same_v<R, T>) {
    wide.reset(new R[total]);
    acc = wide.get();
  }
  parallel_for(pool, total, int64_t{1} << 16,
               [&](int64_t begin, int64_t end) { std::fill(acc + begin, acc + end, R(0)); });
  for (int64_t o = 0; o < g.outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      R* dst = acc + (o * g.rows + ids[j]) * g.inner;
      const T* src = source + (o * count + j) * g.inner;
      for (int64_t e = 0; e < g.inner; ++e) dst[e] += load_element(src[e]);
    }
  }
  if constexpr (!std::is_same_v<R, T>) {
    parallel_for(pool, total, int64_t{1} << 16, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e) out[e] = store_element<T>(acc[e]);
    });
  }
}

// cross_entropy's targets, checked and copied (kernels compare them with class positions).
void run_check_index(const OpaqueOp& op, const std::vector<void*>& slots) {
  const std::vector<int64_t> ids =
      read_ids(op.operands[0], slots, "cross_entropy", 0, op.attrs[0], op.attrs[1]);
  void* out = slots[op.output_slot];
  for (size_t j = 0; j < ids.size(); ++j) {
    if (op.output_dtype == DType::i64) {
      static_cast<int64_t*>(out)[j] = ids[j];
    } else {
      static_cast<int32_t*>(out)[j] = static_cast<int32_t>(ids[j]);
    }
  }
}

// The order of a row's elements: stable, NaN above every number (so last ascending, first
// descending). Keys compare in their own type, so i64 values above 2^53 keep their order.
template <class T>
void sort_row(const T* in, int64_t* positions, int64_t n, bool descending) {
  using R = RegisterOf<T>;
  std::vector<R> keys(n);
  for (int64_t j = 0; j < n; ++j) {
    keys[j] = load_element(in[j]);
    positions[j] = j;
  }
  const auto before = [&](int64_t a, int64_t b) {
    const R ka = keys[a], kb = keys[b];
    if constexpr (std::is_floating_point_v<R>) {
      if (descending) return ka != ka ? kb == kb : ka > kb;
      return kb != kb ? ka == ka : ka < kb;
    } else {
      return descending ? kb < ka : ka < kb;
    }
  };
  std::stable_sort(positions, positions + n, before);
}

void run_argsort(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool) {
  const Rows r = rows_of(op.output_shape);
  const ContiguousOperand input(op.operands[0], slots);
  const bool descending = op.attrs[0] != 0;
  int64_t* out = static_cast<int64_t*>(slots[op.output_slot]);
  visit_dtype(op.operands[0].dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(input.data());
    parallel_for(pool, r.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(r.n, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) {
                     sort_row(x + row * r.n, out + row * r.n, r.n, descending);
                   }
                 });
  });
}

// Running sums of a row, from its end when `reverse` (cumsum's gradient).
template <class T, class Acc>
void cumulative_sums(const T* in, T* out, int64_t n, bool reverse) {
  Acc acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = reverse ? n - 1 - i : i;
    if constexpr (std::is_integral_v<Acc>) {
      acc = static_cast<Acc>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(in[j]));
    } else {
      acc += load_element(in[j]);
    }
    out[j] = convert_element<T>(acc);
  }
}

void run_cumsum(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool) {
  const Rows r = rows_of(op.output_shape);
  const bool reverse = op.attrs[0] != 0;
  const ContiguousOperand input(op.operands[0], slots);
  visit_dtype(op.output_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = reinterpret_cast<const T*>(input.data());
    T* out = static_cast<T*>(slots[op.output_slot]);
    parallel_for(pool, r.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(r.n, 1)),
                 [&](int64_t begin, int64_t end) {
                   for (int64_t row = begin; row < end; ++row) {
                     if constexpr (dtype_info_of<T>().floating) {
                       cumulative_sums<T, double>(x + row * r.n, out + row * r.n, r.n, reverse);
                     } else if constexpr (dtype_info_of<T>().dtype == DType::i64) {
                       cumulative_sums<T, int64_t>(x + row * r.n, out + row * r.n, r.n, reverse);
                     } else {
                       throw Error(std::string("cumsum: no kernel for dtype ") +
                                   dtype_name(op.output_dtype));
                     }
                   }
                 });
  });
}

void run_index_add(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool) {
  const IndexGeometry g = geometry(op.output_shape, static_cast<int>(op.attrs[0]));
  const std::vector<int64_t> ids = read_ids(op.operands[1], slots, "index_add", g.dim, g.rows);
  const ContiguousOperand source(op.operands[0], slots);
  visit_dtype(op.output_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (dtype_info_of<T>().arithmetic) {
      index_add_rows(g, ids, reinterpret_cast<const T*>(source.data()),
                     static_cast<T*>(slots[op.output_slot]), pool);
    } else {
      throw Error(std::string("index_add: no kernel for dtype ") + dtype_name(op.output_dtype));
    }
  });
}

void run_cat(const OpaqueOp& op, const std::vector<void*>& slots) {
  const IndexGeometry g = geometry(op.output_shape, static_cast<int>(op.attrs[0]));
  const size_t esize = dtype_size(op.output_dtype);
  char* out = static_cast<char*>(slots[op.output_slot]);
  int64_t at = 0;
  for (const StridedOperand& part : op.operands) {
    const int64_t rows = part.shape[g.dim];
    const ContiguousOperand source(part, slots);
    const size_t block = rows * g.inner * esize;
    for (int64_t o = 0; o < g.outer; ++o) {
      std::memcpy(out + ((o * g.rows + at) * g.inner) * esize, source.data() + o * block, block);
    }
    at += rows;
  }
}

}  // namespace

void run_opaque_op(const OpaqueOp& op, const std::vector<void*>& slots, ThreadPool& pool) {
  switch (op.op) {
    case ir::OpKind::MatMul: {
      // The share of a step spent in GEMMs is what fusion cannot shrink: measured apart.
      static metrics::Timer& gemm_time = metrics::timer("MatMulTime");
      const metrics::ScopedTimer timed(gemm_time);
      return run_matmul(op, slots);
    }
    case ir::OpKind::IndexSelect:
      return run_index_select(op, slots, pool);
    case ir::OpKind::IndexAdd:
      return run_index_add(op, slots, pool);
    case ir::OpKind::Cat:
      return run_cat(op, slots);
    case ir::OpKind::CheckIndex:
      return run_check_index(op, slots);
    case ir::OpKind::ArgSort:
      return run_argsort(op, slots, pool);
    case ir::OpKind::CumSum:
      return run_cumsum(op, slots, pool);
    case ir::OpKind::AllReduce:
    case ir::OpKind::AllGather:
    case ir::OpKind::ReduceScatter:
    case ir::OpKind::Broadcast: {
      const ContiguousOperand input(op.operands[0], slots);
      distributed::detail::Collective collective;
      collective.op = op.op;
      collective.dtype = op.output_dtype;
      collective.input_shape = op.operands[0].shape;
      collective.attr = op.attrs[0];
      collective.input = input.data();
      collective.output = slots[op.output_slot];
      return distributed::detail::run(collective);
    }
    default:
      throw Error(std::string("cpu backend: no routine for op ") + ir::op_info(op.op).name);
  }
}

}  // namespace lt::backend::cpu
