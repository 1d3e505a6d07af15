#include "backend/cpu/cpu_executable.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "backend/cpu/gemm.h"
#include "compiler/execution_plan.h"
#include "compiler/kernel_program.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/profiler.h"
#include "metrics/metrics_registry.h"

namespace lt::backend::cpu {

namespace {

using compiler::ReduceKind;

// Elements per work unit: big enough to amortize dispatch, small enough to balance cores.
constexpr int64_t kUnitElements = int64_t{1} << 16;
// Elements per gathered tile: the tile buffers of all inputs stay in L1/L2.
constexpr int64_t kTileElements = 1024;
// Columns per work unit of a column reduction, at most: each row's block is read in one stretch.
constexpr int64_t kColumnBlock = 4 * kTileElements;
// A column reduction is split into about this many units: its rows into chunks (each with its
// own partial sums, combined in order) when there are fewer blocks of columns. A fixed count, not
// the number of threads, so that the sums are the same on every machine.
constexpr int64_t kColumnUnits = 64;
// ... and its rows into at most this many chunks: partial sums at most this many times the
// output.
constexpr int64_t kMaxRowChunks = 16;
// Elements per call when every input is direct or one broadcast value (a scalar on the
// device): such tiles cost no gathering, so they can be longer.
constexpr int64_t kUniformTileElements = 8192;
// Rows at least this long are the calls of an elementwise launch whose only gathered inputs are
// periodic (a bias over a product's rows) or per row (a row's statistic): each call then reads
// the bias in place and fills one run with the statistic, where a tile across rows is gathered
// run by run. Shorter rows stay in tiles, where a call covers more of them.
constexpr int64_t kMinRowAlignedCall = 256;
// Under tiered compilation a launch over at most this many elements in all (a loss, a gradient
// norm, a clipping coefficient) stays on the interpreter, where it takes under a millisecond: its
// native compile would only take CPU from the first step of its graph, whose other kernels are
// interpreted until their code is ready (BERT-base's clipping coefficient, one element summed
// from 202 tensors' squared norms, took 0.6 s of that step's 2 s of compiling).
constexpr int64_t kInterpretedLaunchElements = 16;

// An element as bytes: gathers and broadcast fills move elements whatever their dtype.
template <size_t N>
using ElementBits = std::conditional_t<
    N == 1, uint8_t,
    std::conditional_t<N == 2, uint16_t, std::conditional_t<N == 4, uint32_t, uint64_t>>>;

// Calls f(std::integral_constant<size_t, N>{}) for the element size N of some dtype.
template <class F>
void visit_element_size(size_t size, F&& f) {
  switch (size) {
    case 1:
      return f(std::integral_constant<size_t, 1>{});
    case 2:
      return f(std::integral_constant<size_t, 2>{});
    case 4:
      return f(std::integral_constant<size_t, 4>{});
    case 8:
      return f(std::integral_constant<size_t, 8>{});
  }
  throw Error("cpu backend: no dtype has elements of " + std::to_string(size) + " bytes");
}

// `count` copies of `value`: a broadcast run of a gathered input (a row's statistic across the
// row, an 8-bit block's maximum across the block). The library is built for any x86-64, whose
// 16-byte stores made these fills three fifths of the gathers' time in an 8-bit AdamW step; runs
// of every element size are filled with 64- or 32-byte stores where the CPU has them (the i64
// labels of a cross-entropy, broadcast across the vocabulary, too).
template <class E>
[[gnu::always_inline]] inline void fill_run(E* dst, E value, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = value;
}

#if defined(__x86_64__)
// Clears the vector registers' upper halves as an AVX function returns, so that the baseline's
// SSE code after it runs without the transition penalty. GCC emits the instruction itself only
// when it optimizes fully: in the sanitizer builds (-O1) an AVX-512 maximum left the halves
// dirty, and the interpreter's exp after it ran ten times slower.
__attribute__((target("avx"))) inline void clear_upper_halves() {
  __builtin_ia32_vzeroupper();
}

template <class E>
__attribute__((target("avx512f"))) void fill_run_avx512(E* dst, E value, int64_t count) {
  fill_run(dst, value, count);
  clear_upper_halves();
}
template <class E>
__attribute__((target("avx2"))) void fill_run_avx2(E* dst, E value, int64_t count) {
  fill_run(dst, value, count);
  clear_upper_halves();
}
#endif

template <class E>
void fill_elements(E* dst, E value, int64_t count) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return fill_run_avx512(dst, value, count);
  if (avx2) return fill_run_avx2(dst, value, count);
#endif
  fill_run(dst, value, count);
}

template <size_t N>
void gather_typed(const InputAccess& in, const Instance& inst, const void* base, int64_t start,
                  int64_t count, void* dst_void) {
  using E = ElementBits<N>;
  const E* src = static_cast<const E*>(base);
  E* dst = static_cast<E*>(dst_void);
  const int rank = inst.rank;
  if (rank == 0) {
    fill_elements(dst, src[0], count);
    return;
  }
  int64_t idx[Shape::kMaxRank];
  int64_t offset = 0, rest = start;
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = rest % inst.sizes[d];
    rest /= inst.sizes[d];
    offset += idx[d] * in.strides[d];
  }
  const int last = rank - 1;
  const int64_t inner_stride = in.strides[last];
  while (count > 0) {
    const int64_t run = std::min(count, inst.sizes[last] - idx[last]);
    if (inner_stride == 0) {
      fill_elements(dst, src[offset], run);  // a broadcast run
    } else if (inner_stride == 1) {
      std::memcpy(dst, src + offset, run * N);
    } else {
      for (int64_t i = 0; i < run; ++i) dst[i] = src[offset + i * inner_stride];
    }
    dst += run;
    count -= run;
    idx[last] += run;
    offset += run * inner_stride;
    for (int d = last; d > 0 && idx[d] == inst.sizes[d]; --d) {
      offset -= idx[d] * in.strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      offset += in.strides[d - 1];
    }
  }
}

void gather(const InputAccess& in, const Instance& inst, const void* base, size_t elem_size,
            int64_t start, int64_t count, void* dst) {
  visit_element_size(elem_size, [&](auto size) {
    gather_typed<decltype(size)::value>(in, inst, base, start, count, dst);
  });
}

// The largest of `n` f32 values, NaN-free, or NaN if there is one: four vectors of f32 lanes
// (GCC's vector extensions, `Vec` wide, so that the loop has no branches on any x86-64; the
// general fold below branches on NaN for every value, in double, and was a fifth of an 8-bit
// AdamW step, whose block maxima are Max reductions). A maximum of f32 values is exact, so every
// width gives the same result.
using F32x4 = float __attribute__((vector_size(16)));
using F32x16 = float __attribute__((vector_size(64)));

template <class Vec>
[[gnu::always_inline]] inline float max_or_nan_lanes(const float* values, int64_t n) {
  constexpr int kWidth = sizeof(Vec) / 4, kVectors = 4, kLanes = kWidth * kVectors;
  const float inf = std::numeric_limits<float>::infinity();
  Vec best[kVectors], nan[kVectors];
  for (int k = 0; k < kVectors; ++k) {
    best[k] = Vec{} - inf;
    nan[k] = Vec{};
  }
  const int64_t body = n - n % kLanes;
  for (int64_t i = 0; i < body; i += kLanes) {
    for (int k = 0; k < kVectors; ++k) {
      Vec v;
      std::memcpy(&v, values + i + kWidth * k, sizeof v);
      best[k] = v > best[k] ? v : best[k];
      nan[k] = v != v ? Vec{} + 1 : nan[k];
    }
  }
  for (int k = 1; k < kVectors; ++k) {
    best[0] = best[k] > best[0] ? best[k] : best[0];
    nan[0] = nan[k] != 0 ? nan[k] : nan[0];
  }
  float result = -inf;
  bool any_nan = false;
  for (int j = 0; j < kWidth; ++j) {
    result = best[0][j] > result ? best[0][j] : result;
    any_nan = any_nan || nan[0][j] != 0;
  }
  for (int64_t i = body; i < n; ++i) {
    result = values[i] > result ? values[i] : result;
    any_nan = any_nan || values[i] != values[i];
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : result;
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float max_or_nan_avx512(const float* values, int64_t n) {
  const float largest = max_or_nan_lanes<F32x16>(values, n);
  clear_upper_halves();
  return largest;
}
#endif

float max_or_nan(const float* values, int64_t n) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return max_or_nan_avx512(values, n);
#endif
  return max_or_nan_lanes<F32x4>(values, n);
}

// Folds `n` values, stored as T, into kFoldLanes lanes with `step`, combined pairwise in a
// fixed order, so that the result depends on neither the machine nor its instructions.
// Independent lanes let the adds overlap and vectorize: each lane is a chain of dependent
// double adds, one add's latency (4 cycles) an element. Eight lanes (one AVX-512 register,
// two AVX2 ones) left the folds waiting on that chain; 32 lanes are four AVX-512 chains
// (softmax over [12288, 128] 12% faster, a sum of squares 20%). `step` is a plain function of
// lane and value, one per kind, so the lanes stay in registers (a switch inside the loop kept
// them on the stack, a store and a load per element).
constexpr int kFoldLanes = 32;

template <class T, class Step, class Combine>
[[gnu::always_inline]] inline double fold_lanes(const T* values, int64_t n, double init, Step step,
                                                Combine combine_two) {
  double lanes[kFoldLanes];
  std::fill(lanes, lanes + kFoldLanes, init);
  const int64_t body = n - n % kFoldLanes;
  for (int64_t i = 0; i < body; i += kFoldLanes) {
    for (int j = 0; j < kFoldLanes; ++j) lanes[j] = step(lanes[j], load_element(values[i + j]));
  }
  for (int64_t i = body; i < n; ++i)
    lanes[i - body] = step(lanes[i - body], load_element(values[i]));
  for (int width = kFoldLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lanes[j] = combine_two(lanes[j], lanes[j + width]);
  }
  return lanes[0];
}

constexpr auto kAdd = [](double a, double b) { return a + b; };
constexpr auto kAddSquare = [](double lane, double v) { return lane + v * v; };

// The sums of f32 values and of their squares, compiled for AVX-512 and AVX2 beside the
// library's baseline (any x86-64: SSE2's two doubles a register, too few registers for the
// lanes). Every variant computes the same lanes in the same order: the same sums (a square of
// an f32 value is exact in double, so a fused multiply-add rounds it no differently).
#if defined(__x86_64__)
__attribute__((target("avx512f"))) double sum_f32_avx512(const float* values, int64_t n) {
  const double sum = fold_lanes(values, n, 0.0, kAdd, kAdd);
  clear_upper_halves();
  return sum;
}
__attribute__((target("avx512f"))) double sum_squares_f32_avx512(const float* values, int64_t n) {
  const double sum = fold_lanes(values, n, 0.0, kAddSquare, kAdd);
  clear_upper_halves();
  return sum;
}
__attribute__((target("avx2"))) double sum_f32_avx2(const float* values, int64_t n) {
  const double sum = fold_lanes(values, n, 0.0, kAdd, kAdd);
  clear_upper_halves();
  return sum;
}
__attribute__((target("avx2"))) double sum_squares_f32_avx2(const float* values, int64_t n) {
  const double sum = fold_lanes(values, n, 0.0, kAddSquare, kAdd);
  clear_upper_halves();
  return sum;
}
#endif

// The sum of `values`, or of their squares.
template <class T>
double sum_values(const T* values, int64_t n, bool squares) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx512) return squares ? sum_squares_f32_avx512(values, n) : sum_f32_avx512(values, n);
    if (avx2) return squares ? sum_squares_f32_avx2(values, n) : sum_f32_avx2(values, n);
  }
#endif
  return squares ? fold_lanes(values, n, 0.0, kAddSquare, kAdd)
                 : fold_lanes(values, n, 0.0, kAdd, kAdd);
}

// Folds `n` values, stored as T, into `acc` the way the reduction needs.
template <class T>
double fold(ReduceKind kind, const T* values, int64_t n, double acc) {
  switch (kind) {
    case ReduceKind::Max: {
      if constexpr (std::is_same_v<T, float>) {
        // A NaN takes the general path, which returns a NaN it read, bits and all (the last
        // one), not a canonical one.
        if (acc == acc) {
          const float best = max_or_nan(values, n);
          if (best == best) return best > acc ? best : acc;
        }
      }
      // NaN sticks.
      const auto larger = [](double a, double b) { return (b != b || b > a) ? b : a; };
      return larger(
          acc, fold_lanes(values, n, -std::numeric_limits<double>::infinity(), larger, larger));
    }
    case ReduceKind::Norm:
      return acc + sum_values(values, n, /*squares=*/true);
    default:
      return acc + sum_values(values, n, /*squares=*/false);
  }
}

// The first maximum of the run so far (NaN beats everything, as torch.argmax); values[i] is
// at position first + i of the run.
template <class T>
void argmax_fold(const T* values, int64_t n, int64_t first, double& best, int64_t& best_at) {
  if constexpr (std::is_same_v<T, float>) {
    // The run's largest f32 value (or NaN) from the vector fold, then its first position: the
    // same answer as the loop below, which branches on every value (2 ms for [1024, 3072],
    // eight times the maximum alone).
    if (n == 0 || (first > 0 && best != best)) return;  // a NaN found before sticks
    const float largest = max_or_nan(values, n);
    const bool nan = largest != largest;
    if (!nan && first > 0 && !(largest > best)) return;  // ties keep the first position
    int64_t i = 0;
    while (nan ? values[i] == values[i] : values[i] != largest) ++i;
    best = values[i];
    best_at = first + i;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double v = load_element(values[i]);
    if (first + i == 0 || (best == best && (v != v || v > best))) {
      best = v;
      best_at = first + i;
    }
  }
}

// Adds `Rows` rows of f32 values, in order, into per-column f64 sums: each column's
// accumulator is loaded once, takes the rows' values one after another (the same sums as row
// by row) and is stored once. A bias gradient's column sum, its main work outside its kernel:
// [1024, 768] on one thread, AVX2 row by row 124 us from cache and 380 us from memory,
// AVX-512 four rows at a time 95 and 160-200 us.
constexpr int kRowBlock = 4;
template <int Rows>
[[gnu::always_inline]] inline void add_row_block(const float* const* rows, int64_t n, double* acc) {
  for (int64_t j = 0; j < n; ++j) {
    double sum = acc[j];
    for (int r = 0; r < Rows; ++r) sum += static_cast<double>(rows[r][j]);
    acc[j] = sum;
  }
}

#if defined(__x86_64__)
// One row of f32 `values` into per-column f64 sums on AVX2's four-double registers. The library
// is built for any x86-64 (SSE2's two doubles), and this loop ran at half speed on the narrower
// ones; its sums are the same either way.
__attribute__((target("avx2"))) void add_columns_avx2(const float* values, int64_t n, double* acc) {
  const float* const rows[1] = {values};
  add_row_block<1>(rows, n, acc);
  clear_upper_halves();
}
__attribute__((target("avx512f"))) void add_row_block_avx512(const float* const* rows, int64_t n,
                                                             double* acc) {
  add_row_block<kRowBlock>(rows, n, acc);
  clear_upper_halves();
}
__attribute__((target("avx2"))) void add_row_block_avx2(const float* const* rows, int64_t n,
                                                        double* acc) {
  add_row_block<kRowBlock>(rows, n, acc);
  clear_upper_halves();
}
#endif

// Adds kRowBlock f32 rows of n columns into one accumulator per column.
void add_rows_to_columns(const float* const* rows, int64_t n, double* acc) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx512) return add_row_block_avx512(rows, n, acc);
  if (avx2) return add_row_block_avx2(rows, n, acc);
#endif
  add_row_block<kRowBlock>(rows, n, acc);
}

// Adds row `values` (n columns, stored as T) into one accumulator per column.
template <class T>
void fold_columns(ReduceKind kind, const T* values, int64_t n, double* acc) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (avx2 && (kind == ReduceKind::Sum || kind == ReduceKind::Mean)) {
      add_columns_avx2(values, n, acc);
      return;
    }
  }
#endif
  switch (kind) {
    case ReduceKind::Max:
      for (int64_t j = 0; j < n; ++j) {
        const double v = load_element(values[j]);
        acc[j] = (v != v || v > acc[j]) ? v : acc[j];  // NaN sticks
      }
      return;
    case ReduceKind::Norm:
      for (int64_t j = 0; j < n; ++j) {
        const double v = load_element(values[j]);
        acc[j] += v * v;
      }
      return;
    default:
      for (int64_t j = 0; j < n; ++j) acc[j] += load_element(values[j]);
      return;
  }
}

double reduce_init(ReduceKind kind) {
  return kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
}

double combine(ReduceKind kind, double a, double b) {
  if (kind != ReduceKind::Max) return a + b;
  return (b != b || b > a) ? b : a;
}

double finalize(ReduceKind kind, double acc, int64_t count) {
  switch (kind) {
    case ReduceKind::Mean:
      return acc / static_cast<double>(count);
    case ReduceKind::Norm:
      return std::sqrt(acc);
    default:
      return acc;
  }
}

void store(DType dtype, void* base, int64_t index, double value) {
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    static_cast<T*>(base)[index] = convert_element<T>(value);
  });
}

// Per-thread scratch, grown once and reused: no allocation per tile.
struct Scratch {
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  std::vector<double> tiles;  // kTileElements doubles per gathered input, then one for results
  std::vector<double> uniform_tiles;  // kUniformTileElements doubles per broadcast value
  std::vector<double> columns;        // a column reduction's accumulators
};

// One work unit of a launch, run by one thread with its scratch: the unit's inputs bound (read
// in place, gathered into tiles, or broadcast from a tile filled once), then the kernel over
// its positions, elementwise or folded into a reduction's outputs (or partial sums).
class UnitRunner {
 public:
  UnitRunner(const Launch& launch, const CompiledKernel& kernel, const WorkUnit& unit,
             const std::vector<void*>& slots, const double* scalars, Scratch& scratch)
      : launch_(launch),
        kernel_(kernel),
        unit_(unit),
        inst_(launch.instances[unit.instance]),
        slots_(slots),
        scalars_(scalars),
        scratch_(scratch),
        num_in_(inst_.inputs.size()),
        row_(inst_.rank > 0 ? std::max<int64_t>(1, inst_.sizes[inst_.rank - 1]) : 1),
        folds_in_place_(launch.folds_input && inst_.inputs[0].direct) {
    prepare_scratch();
  }

  void run(std::vector<double>& partials) {
    if (launch_.reduce == ReduceKind::None) return run_elementwise();
    values_ = scratch_.tiles.data() + num_in_ * kTileElements;
    scratch_.outputs[0] = values_;
    if (launch_.reduce == ReduceKind::ArgMax) return run_argmax();
    if (inst_.columns) return run_columns(partials);
    run_rows(partials);
  }

 private:
  void prepare_scratch() {
    scratch_.inputs.resize(num_in_);
    scratch_.outputs.resize(std::max<size_t>(1, inst_.output_slots.size()));
    if (scratch_.tiles.size() < (num_in_ + 1) * kTileElements) {
      scratch_.tiles.resize((num_in_ + 1) * kTileElements);
    }
    // A value broadcast everywhere is the same in every tile: fill its tile once per unit.
    const int64_t uniform_fill = launch_.reduce == ReduceKind::None
                                     ? std::min(kUniformTileElements, unit_.end - unit_.begin)
                                     : kTileElements;  // reduction units count outputs
    if (scratch_.uniform_tiles.size() < num_in_ * kUniformTileElements) {
      scratch_.uniform_tiles.resize(num_in_ * kUniformTileElements);
    }
    for (size_t i = 0; i < num_in_; ++i) {
      const InputAccess& in = inst_.inputs[i];
      if (in.uniform && !in.direct) {
        const char* value = static_cast<const char*>(slots_[in.slot]) + in.offset * in.elem_size;
        scratch_.inputs[i] = fill_uniform_tile(i, value, uniform_fill);
      }
    }
  }

  // Points input i at linear iteration positions [pos, pos + n), gathering if needed.
  void bind_inputs(int64_t pos, int64_t n) {
    for (size_t i = 0; i < num_in_; ++i) {
      const InputAccess& in = inst_.inputs[i];
      const char* base = static_cast<const char*>(slots_[in.slot]) + in.offset * in.elem_size;
      if (in.uniform && !in.direct) continue;
      if (in.direct) {
        scratch_.inputs[i] = base + pos * in.elem_size;
      } else if (in.periodic && pos % row_ + n <= row_) {
        scratch_.inputs[i] = base + pos % row_ * in.elem_size;  // within one row
      } else if (in.per_row && pos % row_ + n <= row_ && n <= kUniformTileElements) {
        // Within one row: its value, n times.
        scratch_.inputs[i] =
            fill_uniform_tile(i, base + row_offset(in, pos / row_) * in.elem_size, n);
      } else {
        double* tile = scratch_.tiles.data() + i * kTileElements;
        gather(in, inst_, base, in.elem_size, pos, n, tile);
        scratch_.inputs[i] = tile;
      }
    }
  }

  // Input i's broadcast tile holding n copies of the element at `value`.
  const void* fill_uniform_tile(size_t i, const char* value, int64_t n) {
    double* tile = scratch_.uniform_tiles.data() + i * kUniformTileElements;
    visit_element_size(inst_.inputs[i].elem_size, [&](auto size) {
      using E = ElementBits<decltype(size)::value>;
      E element;
      std::memcpy(&element, value, sizeof element);
      fill_elements(reinterpret_cast<E*>(tile), element, n);
    });
    return tile;
  }

  // Where row `row` of the iteration space starts in `in`, in elements from its first.
  int64_t row_offset(const InputAccess& in, int64_t row) const {
    int64_t offset = 0;
    for (int d = inst_.rank - 2; d >= 0 && row > 0; --d) {
      offset += row % inst_.sizes[d] * in.strides[d];
      row /= inst_.sizes[d];
    }
    return offset;
  }

  // Binds positions [pos, pos + n) and runs the kernel over them.
  void run_kernel(int64_t pos, int64_t n) {
    bind_inputs(pos, n);
    kernel_.run(scratch_.inputs.data(), scratch_.outputs.data(), scalars_, pos, n);
  }

  // The values a reduction folds at positions [pos, pos + n): its direct input itself when the
  // launch folds its input as stored, else the kernel's output tile.
  const void* reduced_values(int64_t pos, int64_t n) {
    if (folds_in_place_) {
      const InputAccess& in = inst_.inputs[0];
      return static_cast<const char*>(slots_[in.slot]) + (in.offset + pos) * in.elem_size;
    }
    run_kernel(pos, n);
    return values_;
  }

  void run_elementwise() {
    const int64_t step = inst_.all_direct             ? unit_.end - unit_.begin
                         : inst_.only_uniform_gathers ? kUniformTileElements
                                                      : kTileElements;
    // Calls that end where rows end, so that no periodic or per-row input is gathered.
    const bool by_rows = !inst_.only_uniform_gathers && inst_.only_row_gathers &&
                         row_ >= kMinRowAlignedCall && row_ <= kUniformTileElements;
    for (int64_t pos = unit_.begin, n = 0; pos < unit_.end; pos += n) {
      n = std::min(by_rows ? row_ - pos % row_ : step, unit_.end - pos);
      bind_inputs(pos, n);
      for (size_t o = 0; o < inst_.output_slots.size(); ++o) {
        scratch_.outputs[o] =
            static_cast<char*>(slots_[inst_.output_slots[o]]) + pos * inst_.output_sizes[o];
      }
      kernel_.run(scratch_.inputs.data(), scratch_.outputs.data(), scalars_, pos, n);
    }
  }

  void run_argmax() {
    int64_t* out = static_cast<int64_t*>(slots_[inst_.output_slots[0]]);
    for (int64_t o = unit_.begin; o < unit_.end; ++o) {
      double best = 0;
      int64_t best_at = 0;
      for (int64_t pos = o * inst_.inner, last = (o + 1) * inst_.inner; pos < last;
           pos += kTileElements) {
        const int64_t n = std::min(kTileElements, last - pos);
        run_kernel(pos, n);
        visit_dtype(launch_.dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          argmax_fold(reinterpret_cast<const T*>(values_), n, pos - o * inst_.inner, best, best_at);
        });
      }
      out[o] = best_at;
    }
  }

  // Columns [begin, end) folded row by row over rows [row_begin, row_end): each row's block of
  // columns is read in calls of the kernel over up to 1024 neighbouring elements, added to one
  // accumulator per column, rows in order (the same sums whatever the number of threads). Row
  // groups never hold a column reduction (they fold trailing dims), so every unit here was
  // made with its rows.
  void run_columns(std::vector<double>& partials) {
    const int64_t cols = unit_.end - unit_.begin;
    scratch_.columns.assign(static_cast<size_t>(cols), reduce_init(launch_.reduce));
    int64_t r = unit_.row_begin;
    // A sum of an f32 tensor as stored (a bias gradient's): its rows are read in place, a
    // block of them at a time.
    if (folds_in_place_ && launch_.dtype == DType::f32 &&
        (launch_.reduce == ReduceKind::Sum || launch_.reduce == ReduceKind::Mean)) {
      for (; r + kRowBlock <= unit_.row_end; r += kRowBlock) {
        const float* rows[kRowBlock];
        for (int k = 0; k < kRowBlock; ++k) {
          rows[k] =
              static_cast<const float*>(reduced_values((r + k) * inst_.outer + unit_.begin, cols));
        }
        add_rows_to_columns(rows, cols, scratch_.columns.data());
      }
    }
    for (; r < unit_.row_end; ++r) {
      for (int64_t c = 0; c < cols; c += kTileElements) {
        const int64_t n = std::min(kTileElements, cols - c);
        const void* values = reduced_values(r * inst_.outer + unit_.begin + c, n);
        visit_dtype(launch_.dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          fold_columns(launch_.reduce, static_cast<const T*>(values), n,
                       scratch_.columns.data() + c);
        });
      }
    }
    if (unit_.partial >= 0) {
      std::copy(scratch_.columns.begin(), scratch_.columns.end(), partials.begin() + unit_.partial);
      return;
    }
    void* out = slots_[inst_.output_slots[0]];
    for (int64_t j = 0; j < cols; ++j) {
      store(launch_.output_dtype, out, unit_.begin + j,
            finalize(launch_.reduce, scratch_.columns[j], inst_.inner));
    }
  }

  // Folds the iteration positions [first, last) of one output element into `acc`.
  double fold_range(int64_t first, int64_t last, double acc) {
    for (int64_t pos = first; pos < last; pos += kTileElements) {
      const int64_t n = std::min(kTileElements, last - pos);
      const void* values = reduced_values(pos, n);
      acc = visit_dtype(launch_.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        return fold(launch_.reduce, static_cast<const T*>(values), n, acc);
      });
    }
    return acc;
  }

  // A reduction over trailing dims: each output folds its contiguous run of positions (or the
  // unit is one partial sum of a split output).
  void run_rows(std::vector<double>& partials) {
    if (unit_.partial >= 0) {
      partials[unit_.partial] = fold_range(unit_.begin, unit_.end, reduce_init(launch_.reduce));
      return;
    }
    void* out = slots_[inst_.output_slots[0]];
    const int64_t inner = inst_.inner;
    if (inner > 0 && inner <= kTileElements / 2) {
      // Rows of at most half a tile (attention's softmax over 128 keys): the kernel runs over as
      // many whole rows as a tile holds, and each row is folded from its part of the tile, where
      // a call a row cost softmax over [12288, 128] 5%. The same values, folded alike.
      const int64_t rows_per_call = kTileElements / inner;
      for (int64_t o = unit_.begin; o < unit_.end; o += rows_per_call) {
        const int64_t rows = std::min(rows_per_call, unit_.end - o);
        const void* values = reduced_values(o * inner, rows * inner);
        visit_dtype(launch_.dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          for (int64_t r = 0; r < rows; ++r) {
            const double acc = fold(launch_.reduce, static_cast<const T*>(values) + r * inner,
                                    inner, reduce_init(launch_.reduce));
            store(launch_.output_dtype, out, o + r, finalize(launch_.reduce, acc, inner));
          }
        });
      }
      return;
    }
    for (int64_t o = unit_.begin; o < unit_.end; ++o) {
      const double acc = fold_range(o * inner, (o + 1) * inner, reduce_init(launch_.reduce));
      store(launch_.output_dtype, out, o, finalize(launch_.reduce, acc, inner));
    }
  }

  const Launch& launch_;
  const CompiledKernel& kernel_;
  const WorkUnit& unit_;
  const Instance& inst_;
  const std::vector<void*>& slots_;
  const double* const scalars_;
  Scratch& scratch_;
  const size_t num_in_;
  const int64_t row_;  // the iteration space's last dim: a periodic input's period
  const bool folds_in_place_;
  double* values_ = nullptr;  // a reduction's kernel output tile
};

void run_unit(const Launch& launch, const CompiledKernel& kernel, const WorkUnit& unit,
              const std::vector<void*>& slots, const double* scalars, std::vector<double>& partials,
              Scratch& scratch) {
  UnitRunner(launch, kernel, unit, slots, scalars, scratch).run(partials);
}

std::string describe_opaque(const OpaqueOp& op) {
  std::string text = op.op == ir::OpKind::MatMul ? "matmul" : "opaque op";
  for (size_t i = 0; i < op.operands.size(); ++i) {
    text += (i == 0 ? " " : " x ") + std::string(dtype_name(op.operands[i].dtype)) + " " +
            op.operands[i].shape.str();
  }
  return text + " -> " + dtype_name(op.output_dtype) + " " + op.output_shape.str();
}

std::string describe_kernel(const ir::Graph& graph, const compiler::Kernel& kernel,
                            size_t instances) {
  std::string text = kernel.program.reduce == ReduceKind::None ? "elementwise" : "reduction";
  const Shape& space = compiler::iteration_shape(graph, kernel);
  text += " of " + std::to_string(kernel.program.instrs.size()) + " ops over " + space.str();
  if (kernel.reduce_mask != 0) {
    text += " (dims";
    for (int d = 0; d < space.rank(); ++d) {
      if (kernel.reduce_mask & (1u << d)) text.append(" ").append(std::to_string(d));
    }
    text += ")";
  }
  const auto count = [](size_t n, const char* what) {
    return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  text += " -> " + std::string(dtype_name(graph.node(kernel.output_nodes[0]).dtype)) + ", " +
          count(kernel.input_nodes.size(), "input") + ", " +
          count(kernel.output_nodes.size(), "output");
  if (instances > 1) text += ", " + std::to_string(instances) + " tensors";
  return text;
}

}  // namespace

namespace {

// Work units over every instance of `launch`, so one launch keeps all cores busy.
void cut_into_units(Launch& launch) {
  for (uint32_t i = 0; i < launch.instances.size(); ++i) {
    const Instance& inst = launch.instances[i];
    if (launch.reduce == ReduceKind::None) {
      for (int64_t b = 0; b < inst.numel; b += kUnitElements) {
        launch.units.push_back({i, b, std::min(inst.numel, b + kUnitElements)});
      }
    } else if (inst.columns) {
      // Blocks of up to 4096 columns (a row's block is read in one stretch: narrow blocks read
      // a few bytes per row at a long stride, a TLB miss each); with fewer than kColumnUnits
      // blocks, their rows in chunks, at least a unit's elements each and at most
      // kMaxRowChunks of them.
      const int64_t blocks = (inst.outer + kColumnBlock - 1) / kColumnBlock;
      const int64_t per_block = (inst.outer + blocks - 1) / blocks;
      const int64_t chunks = std::clamp<int64_t>(kColumnUnits / blocks, 1, kMaxRowChunks);
      const int64_t rows_per_chunk = std::max((inst.inner + chunks - 1) / chunks,
                                              std::max<int64_t>(1, kUnitElements / per_block));
      const bool chunked = rows_per_chunk < inst.inner;
      for (int64_t b = 0; b < inst.outer; b += per_block) {
        const int64_t end = std::min(inst.outer, b + per_block);
        for (int64_t r = 0; r < inst.inner; r += rows_per_chunk) {
          WorkUnit unit{i, b, end};
          unit.row_begin = r;
          unit.row_end = std::min(inst.inner, r + rows_per_chunk);
          if (chunked) {
            unit.partial = launch.num_partials;
            launch.num_partials += end - b;
          }
          launch.units.push_back(unit);
        }
      }
    } else if (inst.outer == 1 && inst.inner > kUnitElements &&
               launch.reduce != ReduceKind::ArgMax) {
      for (int64_t b = 0; b < inst.inner; b += kUnitElements) {
        launch.units.push_back(
            {i, b, std::min(inst.inner, b + kUnitElements), launch.num_partials++});
      }
    } else {
      const int64_t per_unit =
          std::max<int64_t>(1, kUnitElements / std::max<int64_t>(1, inst.inner));
      for (int64_t b = 0; b < inst.outer; b += per_unit) {
        launch.units.push_back({i, b, std::min(inst.outer, b + per_unit)});
      }
    }
  }
}

// A row group's span covers all its launches: the first one's description names them all.
void describe_row_groups(std::vector<Launch>& launches) {
  for (size_t l = 0; l < launches.size(); ++l) {
    Launch& first = launches[l];
    if (first.row_group <= 1) continue;
    int64_t rows = 0;
    for (int64_t instance_rows : first.rows) rows += instance_rows;
    std::string text =
        std::to_string(first.row_group) + " launches over " + std::to_string(rows) + " rows:";
    for (size_t m = 0; m < first.row_group; ++m) {
      text += " [" + launches[l + m].description + "]";
    }
    first.description = std::move(text);
    l += first.row_group - 1;
  }
}

// The elements a planned launch iterates over `graph`'s sizes, all its instances together.
int64_t launch_elements(const ir::Graph& graph, const compiler::ExecutionPlan& plan,
                        const compiler::PlannedLaunch& planned) {
  int64_t elements = 0;
  for (uint32_t k : planned.kernels) {
    const compiler::Kernel& kernel = plan.kernels[k];
    elements +=
        make_instance(graph, plan, kernel, kernel.program.reduce, /*allow_columns=*/true).numel;
  }
  return elements;
}

}  // namespace

std::shared_ptr<CpuCompiledGraph> compile_graph(const ir::Graph& graph,
                                                const CompileOptions& options,
                                                const KernelSettings& kernels) {
  auto compiled = std::make_shared<CpuCompiledGraph>();
  compiled->plan = compiler::plan_execution(graph, options.fusion);
  const compiler::ExecutionPlan& plan = compiled->plan;
  compiled->num_kernels = static_cast<int64_t>(plan.kernels.size());
  compiled->settings = kernels;
  KernelSettings interpreter = kernels;
  interpreter.native = false;
  compiled->interpreted_only.assign(plan.launches.size(), 0);
  std::vector<const compiler::KernelProgram*> programs, interpreted_programs;
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    const compiler::Kernel& first = plan.kernels[plan.launches[l].kernels.front()];
    if (first.opaque >= 0) continue;
    compiled->interpreted_only[l] =
        kernels.native && kernels.tiered &&
        launch_elements(graph, plan, plan.launches[l]) <= kInterpretedLaunchElements;
    (compiled->interpreted_only[l] ? interpreted_programs : programs).push_back(&first.program);
  }
  const std::vector<std::shared_ptr<const CompiledKernel>> built = get_kernels(programs, kernels);
  const std::vector<std::shared_ptr<const CompiledKernel>> interpreted =
      get_kernels(interpreted_programs, interpreter);
  size_t next_program = 0, next_interpreted = 0;
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    const bool opaque = plan.kernels[plan.launches[l].kernels.front()].opaque >= 0;
    compiled->kernels.push_back(opaque                          ? nullptr
                                : compiled->interpreted_only[l] ? interpreted[next_interpreted++]
                                                                : built[next_program++]);
  }
  return compiled;
}

namespace {

// A row group's blocks: for each of its tensors, as many rows as make about kUnitElements
// elements of its widest launch (one row at least), on the group's first launch; and on each
// of its launches, the kernel instances of each tensor.
void size_row_blocks(std::vector<Launch>& launches) {
  for (size_t l = 0; l < launches.size(); ++l) {
    Launch& lead = launches[l];
    if (lead.row_group <= 1) continue;
    const size_t instances = lead.rows.size();
    std::vector<int64_t> widest(instances, 1);
    for (size_t m = 0; m < lead.row_group; ++m) {
      Launch& launch = launches[l + m];
      launch.row_members.assign(instances, {});
      for (uint32_t j = 0; j < launch.row_instance.size(); ++j) {
        const uint32_t i = launch.row_instance[j];
        launch.row_members[i].push_back(j);
        if (lead.rows[i] > 0) {
          widest[i] = std::max(widest[i], launch.instances[j].numel / lead.rows[i]);
        }
      }
    }
    lead.widest_row = widest;
    for (uint32_t i = 0; i < instances; ++i) {
      const int64_t per_block = std::max<int64_t>(1, kUnitElements / widest[i]);
      lead.rows_per_block.push_back(per_block);
      for (int64_t begin = 0; begin < lead.rows[i]; begin += per_block) {
        lead.row_blocks.push_back({i, begin, std::min(lead.rows[i], begin + per_block)});
      }
    }
    l += lead.row_group - 1;
  }
}

// Each row-local temporary goes to the first launch of the row group that writes it, and to a
// worker's scratch, where its tensor's rows are at most kUnitElements elements wide (a block's
// rows of it then take at most kUnitElements elements); wider ones stay in the arena. Returns
// which temporaries the scratch holds.
std::vector<char> place_row_locals(const compiler::ExecutionPlan& plan, const ir::Graph& graph,
                                   CpuExecutable& exe) {
  std::vector<size_t> group_of(plan.launches.size());
  for (size_t l = 0; l < plan.launches.size();) {
    const size_t count = std::max<uint32_t>(1, plan.launches[l].row_group);
    for (size_t m = l; m < l + count; ++m) group_of[m] = l;
    l += count;
  }
  const size_t first_temp = static_cast<size_t>(plan.num_inputs + plan.num_outputs);
  std::vector<char> in_scratch(plan.temp_nodes.size(), 0);
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    const std::vector<uint32_t>& kernels = plan.launches[l].kernels;
    for (uint32_t j = 0; j < kernels.size(); ++j) {
      for (uint32_t node : plan.kernels[kernels[j]].output_nodes) {
        const auto slot = static_cast<size_t>(plan.slot_of[node]);
        if (slot < first_temp || !plan.temp_row_local[slot - first_temp]) continue;
        Launch& lead = exe.launches[group_of[l]];
        const uint32_t i = plan.launches[l].row_instance[j];
        if (lead.widest_row[i] > kUnitElements || lead.rows[i] <= 0) continue;
        const ir::Node& value = graph.node(node);
        const int64_t bytes = value.shape.numel() * static_cast<int64_t>(dtype_size(value.dtype));
        lead.row_locals.push_back({slot, bytes / lead.rows[i], i});
        in_scratch[slot - first_temp] = 1;
      }
    }
  }
  // Each instance's temporaries one after another in a block's scratch.
  for (Launch& lead : exe.launches) {
    std::vector<size_t> used(lead.rows.size(), 0);
    for (Launch::RowLocal& local : lead.row_locals) {
      local.offset = used[local.instance];
      const auto bytes = static_cast<size_t>(local.row_bytes * lead.rows_per_block[local.instance]);
      used[local.instance] += (bytes + compiler::kArenaAlignment - 1) / compiler::kArenaAlignment *
                              compiler::kArenaAlignment;
      lead.row_local_bytes = std::max(lead.row_local_bytes, used[local.instance]);
    }
  }
  return in_scratch;
}

}  // namespace

std::shared_ptr<Executable> CpuCompiledGraph::bind(const ir::Graph& graph, std::string* why) const {
  if (!plan.assumptions.hold_for(graph, why)) return nullptr;
  auto exe = std::make_shared<CpuExecutable>();
  exe->num_kernels = num_kernels;
  exe->num_inputs = plan.num_inputs;
  exe->num_outputs = plan.num_outputs;
  exe->donation_candidates = plan.donation_candidates;
  exe->output_launch = plan.output_launch;
  std::vector<size_t> grown;  // launches of interpreted_only that these sizes make larger
  std::vector<const compiler::KernelProgram*> grown_programs;
  for (size_t l = 0; l < plan.launches.size(); ++l) {
    Launch launch;
    const compiler::Kernel& first = plan.kernels[plan.launches[l].kernels.front()];
    if (first.opaque >= 0) {
      launch.opaque = std::make_shared<const OpaqueOp>(make_opaque_op(graph, plan, first));
      if (launch.opaque->op == ir::OpKind::MatMul) prepare_gemm();  // on the host, before a launch
      launch.description = describe_opaque(*launch.opaque);
      exe->launches.push_back(std::move(launch));
      continue;
    }
    launch.kernel = kernels[l];
    launch.row_group = plan.launches[l].row_group;
    for (size_t i = 0; i < plan.launches[l].row_nodes.size(); ++i) {
      launch.rows.push_back(compiler::row_group_rows(plan, graph, l, i));
    }
    launch.row_instance = plan.launches[l].row_instance;
    launch.reduce = first.program.reduce;
    launch.num_scalars = first.program.num_scalars;
    launch.dtype = first.program.instrs[first.program.outputs[0]].dtype;
    launch.output_dtype = graph.node(first.output_nodes[0]).dtype;
    const compiler::KernelProgram& program = first.program;
    launch.folds_input = launch.reduce != ReduceKind::None && launch.reduce != ReduceKind::ArgMax &&
                         program.instrs.size() == 1 && program.num_scalars == 0 &&
                         program.instrs[0].kind == compiler::InstrKind::Input &&
                         program.outputs[0] == 0 && program.input_dtypes[0] == launch.dtype;
    launch.description = describe_kernel(graph, first, plan.launches[l].kernels.size());
    for (uint32_t k : plan.launches[l].kernels) {
      launch.instances.push_back(
          make_instance(graph, plan, plan.kernels[k], launch.reduce, /*allow_columns=*/true));
    }
    if (interpreted_only[l]) {
      int64_t elements = 0;
      for (const Instance& instance : launch.instances) elements += instance.numel;
      // Small for the graph it was compiled for, not for these sizes: native code after all.
      if (elements > kInterpretedLaunchElements) {
        grown.push_back(l);
        grown_programs.push_back(&program);
      }
    }
    cut_into_units(launch);
    exe->launches.push_back(std::move(launch));
  }
  if (!grown.empty()) {  // one request, so that the compiler batches them as a graph's kernels
    const std::vector<std::shared_ptr<const CompiledKernel>> native =
        get_kernels(grown_programs, settings);
    for (size_t g = 0; g < grown.size(); ++g) exe->launches[grown[g]].kernel = native[g];
  }
  describe_row_groups(exe->launches);
  size_row_blocks(exe->launches);
  const compiler::ArenaLayout arena =
      compiler::layout_arena(plan, graph, place_row_locals(plan, graph, *exe));
  exe->temp_offset = arena.temp_offset;
  exe->temporary_bytes = static_cast<int64_t>(arena.arena_bytes);
  exe->num_launches = static_cast<int64_t>(exe->launches.size());
  return exe;
}

namespace {

// Runs launches l .. l + row_group - 1 row block by row block: each block's rows go through
// every launch of the group before the next block starts, so the rows the launches share are
// read from memory once and from cache after that. A multi-tensor group runs each tensor's
// blocks alike (instance i of every launch), the blocks of all its tensors shared out between
// the workers.
void run_row_group(const CpuExecutable& exe, size_t first, const ExecutionArgs& args,
                   std::vector<void*>& slots, ThreadPool& pool) {
  static metrics::Counter& interpreted_launches = metrics::counter("InterpretedKernelLaunch");
  static metrics::Counter& row_groups = metrics::counter("RowGroupLaunch");
  row_groups.add();
  const Launch& lead = exe.launches[first];
  const size_t count = lead.row_group;
  // Per launch, each instance's scalar arguments one after another.
  std::vector<std::vector<double>> scalars(count);
  for (size_t m = 0; m < count; ++m) {
    for (const Instance& inst : exe.launches[first + m].instances) {
      for (uint32_t s : inst.scalar_args) scalars[m].push_back(args.scalars[s]);
    }
  }
  const std::vector<Launch::RowBlock>& blocks = lead.row_blocks;
  const std::vector<Launch::RowLocal>& locals = lead.row_locals;
  std::vector<double> no_partials;
  std::atomic<size_t> next{0};
  std::atomic<bool> interpreted{false};
  pool.run([&](int) {
    thread_local Scratch scratch;
    // The group's slots as this worker sees them: a row-local temporary's slot points where
    // its row 0 would be, so that a block's rows land in the worker's scratch.
    thread_local std::vector<void*> own_slots;
    thread_local std::vector<std::byte> block_scratch;
    std::vector<void*>* unit_slots = &slots;
    uintptr_t aligned_base = 0;
    for (size_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < blocks.size();) {
      const Launch::RowBlock& block = blocks[b];
      if (!locals.empty() && unit_slots == &slots) {  // this worker's first block
        own_slots = slots;
        if (block_scratch.size() < lead.row_local_bytes + compiler::kArenaAlignment) {
          block_scratch.resize(lead.row_local_bytes + compiler::kArenaAlignment);
        }
        const auto base = reinterpret_cast<uintptr_t>(block_scratch.data());
        aligned_base = (base + compiler::kArenaAlignment - 1) / compiler::kArenaAlignment *
                       compiler::kArenaAlignment;
        unit_slots = &own_slots;
      }
      // Kernels address a block's rows from where row 0 would be (slot + position): an
      // address below the scratch, never read, which the kernels' offsets bring back into it.
      for (const Launch::RowLocal& local : locals) {
        if (local.instance != block.instance) continue;
        own_slots[local.slot] = reinterpret_cast<void*>(
            aligned_base + local.offset - static_cast<uintptr_t>(block.begin * local.row_bytes));
      }
      const int64_t rows = lead.rows[block.instance];
      for (size_t m = 0; m < count; ++m) {
        const Launch& launch = exe.launches[first + m];
        const CompiledKernel& kernel = launch.kernel->resolve();
        if (std::strcmp(kernel.method(), "interpreter") == 0) {
          interpreted.store(true, std::memory_order_relaxed);
        }
        for (uint32_t j : launch.row_members[block.instance]) {
          // Elementwise launches count elements, reductions their outputs (one per row).
          const int64_t per_row =
              launch.reduce == ReduceKind::None ? launch.instances[j].numel / rows : 1;
          const double* unit_scalars =
              scalars[m].data() + j * static_cast<size_t>(launch.num_scalars);
          run_unit(launch, kernel, WorkUnit{j, block.begin * per_row, block.end * per_row},
                   *unit_slots, unit_scalars, no_partials, scratch);
        }
      }
    }
  });
  if (interpreted.load()) interpreted_launches.add(static_cast<int64_t>(count));
}

// Combines the partial folds of split reductions in the order of their units (row chunks of a
// column block come one after the other, first to last), and stores the results.
void combine_partials(const Launch& launch, const std::vector<double>& partials,
                      const std::vector<void*>& slots) {
  std::vector<double> acc(launch.instances.size(), reduce_init(launch.reduce));
  std::vector<char> split(launch.instances.size(), 0);
  std::vector<double> columns;
  for (const WorkUnit& unit : launch.units) {
    if (unit.partial < 0) continue;
    const Instance& inst = launch.instances[unit.instance];
    if (!inst.columns) {
      split[unit.instance] = 1;
      acc[unit.instance] = combine(launch.reduce, acc[unit.instance], partials[unit.partial]);
      continue;
    }
    const int64_t cols = unit.end - unit.begin;
    const auto first = partials.begin() + unit.partial;
    if (unit.row_begin == 0) {
      columns.assign(first, first + cols);
    } else {
      for (int64_t j = 0; j < cols; ++j) columns[j] = combine(launch.reduce, columns[j], first[j]);
    }
    if (unit.row_end == inst.inner) {
      for (int64_t j = 0; j < cols; ++j) {
        store(launch.output_dtype, slots[inst.output_slots[0]], unit.begin + j,
              finalize(launch.reduce, columns[j], inst.inner));
      }
    }
  }
  for (size_t i = 0; i < launch.instances.size(); ++i) {
    if (!split[i]) continue;
    const Instance& inst = launch.instances[i];
    store(launch.output_dtype, slots[inst.output_slots[0]], 0,
          finalize(launch.reduce, acc[i], inst.inner));
  }
}

const char* launch_kind(const Launch& launch) {
  if (launch.opaque) {
    switch (launch.opaque->op) {
      case ir::OpKind::MatMul:
        return "matmul";
      case ir::OpKind::IndexSelect:
        return "index_select";
      case ir::OpKind::IndexAdd:
        return "index_add";
      case ir::OpKind::CheckIndex:
        return "check_index";
      case ir::OpKind::ArgSort:
        return "argsort";
      case ir::OpKind::CumSum:
        return "cumsum";
      case ir::OpKind::AllReduce:
      case ir::OpKind::AllGather:
      case ir::OpKind::ReduceScatter:
      case ir::OpKind::Broadcast:
        return "collective";
      default:
        return "opaque op";
    }
  }
  if (launch.row_group > 1) return "row group";
  return launch.reduce == compiler::ReduceKind::None ? "elementwise kernel" : "reduction kernel";
}

}  // namespace

void run_executable(const CpuExecutable& exe, const ExecutionArgs& args, ThreadPool& pool,
                    const std::function<BufferPtr(size_t)>& take_arena, size_t& launches_begun) {
  static metrics::Counter& interpreted_launches = metrics::counter("InterpretedKernelLaunch");
  std::vector<void*> slots(exe.num_inputs + exe.num_outputs + exe.temp_offset.size());
  for (int i = 0; i < exe.num_inputs; ++i) slots[i] = args.inputs[i]->data();
  for (int i = 0; i < exe.num_outputs; ++i) slots[exe.num_inputs + i] = args.outputs[i]->data();
  const BufferPtr arena =
      exe.temporary_bytes > 0 ? take_arena(static_cast<size_t>(exe.temporary_bytes)) : nullptr;
  const size_t first_temp = static_cast<size_t>(exe.num_inputs + exe.num_outputs);
  for (size_t t = 0; t < exe.temp_offset.size(); ++t) {
    slots[first_temp + t] = static_cast<char*>(arena->data()) + exe.temp_offset[t];
  }

  std::vector<double> scalars;
  std::vector<double> partials;
  for (size_t l = 0; l < exe.launches.size(); ++l) {
    const Launch& launch = exe.launches[l];
    launches_begun = l + 1;
    // Spans by kind (the timeline's answer to "GEMMs or the rest?"); free while not profiling.
    const profiler::Scope span(launch_kind(launch), "launch", launch.description);
    if (launch.opaque) {
      run_opaque_op(*launch.opaque, slots, pool);
      continue;
    }
    if (launch.row_group > 1) {
      launches_begun = l + launch.row_group;
      run_row_group(exe, l, args, slots, pool);
      l += launch.row_group - 1;
      continue;
    }
    // Each instance's scalar arguments, gathered once per launch.
    const size_t ns = static_cast<size_t>(launch.num_scalars);
    scalars.resize(launch.instances.size() * ns);
    for (size_t i = 0; i < launch.instances.size(); ++i) {
      for (size_t s = 0; s < ns; ++s) {
        scalars[i * ns + s] = args.scalars[launch.instances[i].scalar_args[s]];
      }
    }
    partials.resize(launch.num_partials);  // each unit writes its own, all of them
    // Resolved per work unit: a long launch that began on the interpreter (the first step of
    // a big optimizer, say) takes the native code at the next 64K elements once it is ready.
    // Both compute each element with the same functors in the same precision.
    std::atomic<size_t> next{0};
    std::atomic<bool> interpreted{false};
    pool.run([&](int) {
      thread_local Scratch scratch;
      for (size_t u; (u = next.fetch_add(1, std::memory_order_relaxed)) < launch.units.size();) {
        const CompiledKernel& kernel = launch.kernel->resolve();
        if (std::strcmp(kernel.method(), "interpreter") == 0) {
          interpreted.store(true, std::memory_order_relaxed);
        }
        run_unit(launch, kernel, launch.units[u], slots,
                 scalars.data() + launch.units[u].instance * ns, partials, scratch);
      }
    });
    if (interpreted.load()) interpreted_launches.add();
    // Split reductions: combine the partial folds in a fixed order (deterministic results).
    if (launch.num_partials > 0) combine_partials(launch, partials, slots);
  }
}

}  // namespace lt::backend::cpu
