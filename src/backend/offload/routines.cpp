#include "backend/offload/routines.h"

#include <string>

#include "backend/kernel_source.h"
#include "compiler/kernel_program.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt::backend::offload {

namespace {

std::string bits_type(size_t element_size) {
  return element_size == 1   ? "uchar"
         : element_size == 2 ? "ushort"
         : element_size == 4 ? "uint"
                             : "ulong";
}
std::string kind(int k) {
  return std::to_string(k);
}

// The grid-stride loop every routine runs its elements in.
const char* const kEachElement =
    "  for (long i = lt_global_id(); i < total; i += lt_global_size()) {\n";

// The vocabulary the routines are written in, per dialect: kernels, memory spaces, the
// work-item's place in the grid, the work-group's barrier, and 8 longs passed by value (a
// copy's sizes and strides).
constexpr const char* kOpenClVocabulary = R"(
#define LT_KERNEL __kernel
#define LT_GROUP_SIZE(n) __attribute__((reqd_work_group_size(n, 1, 1)))
#define LT_GLOBAL __global
#define LT_LOCAL __local
#define LT_BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define lt_global_id() ((long)get_global_id(0))
#define lt_global_size() ((long)get_global_size(0))
#define lt_local_id() ((int)get_local_id(0))
#define lt_group_id() ((long)get_group_id(0))
#define lt_num_groups() ((long)get_num_groups(0))
typedef long8 LtLong8;
#define lt_unpack8(v, a) vstore8(v, 0, a)
)";

constexpr const char* kCudaVocabulary = R"(
#define LT_FN static inline
#define LT_KERNEL extern "C" __global__
#define LT_GROUP_SIZE(n) __launch_bounds__(n)
#define LT_GLOBAL
#define LT_LOCAL __shared__
#define LT_BARRIER() __syncthreads()
#define lt_global_id() ((long)blockIdx.x * (long)blockDim.x + (long)threadIdx.x)
#define lt_global_size() ((long)gridDim.x * (long)blockDim.x)
#define lt_local_id() ((int)threadIdx.x)
#define lt_group_id() ((long)blockIdx.x)
#define lt_num_groups() ((long)gridDim.x)
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
struct LtLong8 {
  long v[8];
};
#define lt_unpack8(x, a) \
  for (int lt_d = 0; lt_d < 8; ++lt_d) (a)[lt_d] = (x).v[lt_d]
)";

}  // namespace

Routines::Routines(KernelDialect dialect) : dialect_(dialect) {
  if (dialect == KernelDialect::cpu) throw Error("routines: the cpu backend has its own");
}

std::string Routines::storage(DType dtype) const {
  return storage_type(dtype, dialect_);
}
std::string Routines::reg(DType dtype) const {
  return register_type(dtype, dialect_);
}
std::string Routines::load(DType dtype, const std::string& element) const {
  return std::string("(") + load_expression(dtype, element, dialect_) + ")";
}
std::string Routines::store(DType dtype, const std::string& value) const {
  return store_expression(dtype, value, dialect_);
}

std::string Routines::add(const std::string& name, const std::string& body) {
  sources_.emplace(name, body);
  return name;
}

std::vector<std::string> Routines::add_every_routine() {
  using enum DType;
  std::vector<std::string> names;
  for (size_t size : {1, 2, 4, 8}) {
    names.push_back(copy(size));
    for (DType ids : {i32, i64}) names.push_back(index_select(size, ids));
  }
  // What reductions write (their register dtypes) and what their folds store.
  for (DType values : {f32, f64, i32, i64}) {
    for (DType output : {f32, f64, bf16, f16, i32, i64}) names.push_back(fold(values, output));
  }
  for (DType dtype : {f32, f64, bf16, f16}) {
    names.push_back(matmul(dtype, dtype));
    names.push_back(matmul(dtype, f32));
    for (DType ids : {i32, i64}) names.push_back(index_add(dtype, ids));
    names.push_back(cumsum(dtype));
  }
  names.push_back(cumsum(i64));
  for (DType dtype : {bf16, f16}) names.push_back(convert(dtype, dtype, true));
  for (DType ids : {i32, i64}) {
    names.push_back(check_ids(ids));
    names.push_back(convert(ids, i64));
  }
  for (DType keys : {f32, f64, bf16, f16, i32, i64}) names.push_back(argsort(keys));
  return names;
}

std::string Routines::source() const {
  std::string out = dialect_ == KernelDialect::opencl ? kOpenClVocabulary : kCudaVocabulary;
  for (const auto& [name, body] : sources_) out += body;
  return out;
}

std::string Routines::copy(size_t element_size) {
  const std::string t = bits_type(element_size);
  const std::string name = "lt_copy_" + std::to_string(element_size);
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " + t + "* src, LT_GLOBAL " + t +
                       "* dst, long total, int rank, LtLong8 sizes, LtLong8 src_strides, long "
                       "src_offset, LtLong8 dst_strides, long dst_offset) {\n"
                       "  long size[8], ss[8], ds[8];\n"
                       "  lt_unpack8(sizes, size);\n"
                       "  lt_unpack8(src_strides, ss);\n"
                       "  lt_unpack8(dst_strides, ds);\n" +
                       kEachElement +
                       "    long rest = i, s = src_offset, d = dst_offset;\n"
                       "    for (int k = rank - 1; k >= 0; --k) {\n"
                       "      const long c = rest % size[k];\n"
                       "      rest /= size[k];\n"
                       "      s += c * ss[k];\n"
                       "      d += c * ds[k];\n"
                       "    }\n"
                       "    dst[d] = src[s];\n"
                       "  }\n}\n");
}

std::string Routines::fold(DType values, DType output) {
  using compiler::ReduceKind;
  const std::string name = std::string("lt_fold_") + dtype_name(values) + "_" + dtype_name(output);
  const std::string lanes = std::to_string(kFoldLanes);
  const std::string mean = kind(static_cast<int>(ReduceKind::Mean));
  const std::string max = kind(static_cast<int>(ReduceKind::Max));
  const std::string norm = kind(static_cast<int>(ReduceKind::Norm));
  const std::string argmax = kind(static_cast<int>(ReduceKind::ArgMax));
  return add(name,
             "LT_KERNEL LT_GROUP_SIZE(" + lanes + ") void " + name + "(LT_GLOBAL const " +
                 storage(values) + "* values, LT_GLOBAL " + storage(output) +
                 "* out, long outer, long inner, int kind) {\n"
                 "  LT_LOCAL double acc[" +
                 lanes +
                 "];\n"
                 "  LT_LOCAL long at[" +
                 lanes +
                 "];\n"
                 "  const int lane = lt_local_id();\n"
                 "  for (long o = lt_group_id(); o < outer; o += lt_num_groups()) {\n"
                 "    double a = kind == " +
                 max +
                 " ? -INFINITY : 0.0;\n"
                 "    long a_at = -1;\n"
                 "    for (long j = lane; j < inner; j += " +
                 lanes +
                 ") {\n"
                 "      const double v = (double)" +
                 load(values, "values[o * inner + j]") +
                 ";\n"
                 "      if (kind == " +
                 argmax +
                 ") {\n"
                 "        if (a_at < 0 || (a == a && (v != v || v > a))) {\n"
                 "          a = v;\n"
                 "          a_at = j;\n"
                 "        }\n"
                 "      } else if (kind == " +
                 max +
                 ") {\n"
                 "        a = (v != v || v > a) ? v : a;\n"  // NaN sticks
                 "      } else if (kind == " +
                 norm +
                 ") {\n"
                 "        a += v * v;\n"
                 "      } else {\n"
                 "        a += v;\n"
                 "      }\n"
                 "    }\n"
                 "    acc[lane] = a;\n"
                 "    at[lane] = a_at;\n"
                 "    LT_BARRIER();\n"
                 "    for (int s = " +
                 std::to_string(kFoldLanes / 2) +
                 "; s > 0; s >>= 1) {\n"
                 "      if (lane < s) {\n"
                 "        const double x = acc[lane], y = acc[lane + s];\n"
                 "        const long xi = at[lane], yi = at[lane + s];\n"
                 "        if (kind == " +
                 argmax +
                 ") {\n"
                 // The first maximum: a NaN beats every number, ties go to the earlier position.
                 "          if (yi >= 0 && (xi < 0 || (x != x ? (y != y && yi < xi)\n"
                 "                                             : (y != y || y > x || (y == x && yi "
                 "< xi))))) {\n"
                 "            acc[lane] = y;\n"
                 "            at[lane] = yi;\n"
                 "          }\n"
                 "        } else if (kind == " +
                 max +
                 ") {\n"
                 "          acc[lane] = (y != y || y > x) ? y : x;\n"
                 "        } else {\n"
                 "          acc[lane] = x + y;\n"
                 "        }\n"
                 "      }\n"
                 "      LT_BARRIER();\n"
                 "    }\n"
                 "    if (lane == 0) {\n"
                 "      const double total = acc[0];\n"
                 "      const double result = kind == " +
                 mean +
                 " ? total / (double)inner\n"
                 "                          : kind == " +
                 norm +
                 " ? sqrt(total)\n"
                 "                          : kind == " +
                 argmax +
                 " ? (double)(at[0] < 0 ? 0 : at[0])\n"
                 "                                                   : total;\n"
                 "      out[o] = " +
                 store(output, "result") +
                 ";\n"
                 "    }\n"
                 "    LT_BARRIER();\n"
                 "  }\n}\n");
}

std::string Routines::matmul(DType operands, DType output) {
  const std::string name =
      std::string("lt_matmul_") + dtype_name(operands) + "_" + dtype_name(output);
  const std::string s = storage(operands), r = reg(operands);
  const std::string tile = std::to_string(kTile), lanes = std::to_string(kTile * kTile);
  return add(
      name,
      "LT_KERNEL LT_GROUP_SIZE(" + lanes + ") void " + name + "(LT_GLOBAL const " + s +
          "* a, LT_GLOBAL const " + s + "* b, LT_GLOBAL " + storage(output) +
          "* c, long m, long n, long k) {\n"
          "  LT_LOCAL " +
          r + " a_tile[" + tile + "][" + tile +
          "];\n"
          "  LT_LOCAL " +
          r + " b_tile[" + tile + "][" + tile +
          "];\n"
          "  const int ty = lt_local_id() / " +
          tile + ", tx = lt_local_id() % " + tile +
          ";\n"
          "  const long row_tiles = (m + " +
          tile + " - 1) / " + tile + ", col_tiles = (n + " + tile + " - 1) / " + tile +
          ";\n"
          "  const long g = lt_group_id();\n"
          "  const long batch = g / (row_tiles * col_tiles);\n"
          "  const long row = (g / col_tiles) % row_tiles * " +
          tile +
          " + ty;\n"
          "  const long col = g % col_tiles * " +
          tile +
          " + tx;\n"
          "  LT_GLOBAL const " +
          s +
          "* ab = a + batch * m * k;\n"
          "  LT_GLOBAL const " +
          s +
          "* bb = b + batch * k * n;\n"
          "  " +
          r +
          " acc = 0;\n"
          "  for (long p0 = 0; p0 < k; p0 += " +
          tile +
          ") {\n"
          "    a_tile[ty][tx] = row < m && p0 + tx < k ? " +
          load(operands, "ab[row * k + p0 + tx]") +
          " : 0;\n"
          "    b_tile[ty][tx] = p0 + ty < k && col < n ? " +
          load(operands, "bb[(p0 + ty) * n + col]") +
          " : 0;\n"
          "    LT_BARRIER();\n"
          "    const int steps = k - p0 < " +
          tile + " ? (int)(k - p0) : " + tile +
          ";\n"
          "    for (int p = 0; p < steps; ++p) acc = fma(a_tile[ty][p], b_tile[p][tx], acc);\n"
          "    LT_BARRIER();\n"
          "  }\n"
          "  if (row < m && col < n) c[(batch * m + row) * n + col] = " +
          store(output, "acc") + ";\n}\n");
}

std::string Routines::check_ids(DType ids) {
  const std::string name = std::string("lt_check_ids_") + dtype_name(ids);
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " + storage(ids) +
                       "* ids, long offset, long stride, long count, long size, long ignore, "
                       "int has_ignore, LT_GLOBAL long* status) {\n"
                       "  status[0] = -1;\n"
                       "  status[1] = 0;\n"
                       "  for (long j = 0; j < count; ++j) {\n"
                       "    const long id = (long)ids[offset + j * stride];\n"
                       "    if ((id < 0 || id >= size) && !(has_ignore && id == ignore)) {\n"
                       "      status[0] = j;\n"
                       "      status[1] = id;\n"
                       "      return;\n"
                       "    }\n"
                       "  }\n}\n");
}

std::string Routines::index_select(size_t element_size, DType ids) {
  const std::string t = bits_type(element_size);
  const std::string name =
      "lt_index_select_" + std::to_string(element_size) + "_" + dtype_name(ids);
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " + t +
                       "* table, LT_GLOBAL const " + storage(ids) +
                       "* ids, long ids_offset, long ids_stride, LT_GLOBAL " + t +
                       "* out, long outer, long rows, long inner, long count) {\n"
                       "  const long total = outer * count * inner;\n" +
                       kEachElement +
                       "    const long e = i % inner, j = (i / inner) % count, o = i / (inner * "
                       "count);\n"
                       "    long id = (long)ids[ids_offset + j * ids_stride];\n"
                       "    id = id < 0 ? 0 : (id >= rows ? rows - 1 : id);\n"
                       "    out[i] = table[(o * rows + id) * inner + e];\n"
                       "  }\n}\n");
}

std::string Routines::index_add(DType dtype, DType ids) {
  const std::string name = std::string("lt_index_add_") + dtype_name(dtype) + "_" + dtype_name(ids);
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " + storage(dtype) +
                       "* source, LT_GLOBAL const " + storage(ids) +
                       "* ids, long ids_offset, long ids_stride, LT_GLOBAL " + reg(dtype) +
                       "* acc, long outer, long rows, long inner, long count) {\n"
                       "  const long total = outer * inner;\n" +
                       kEachElement +
                       "    const long o = i / inner, e = i % inner;\n"
                       "    for (long r = 0; r < rows; ++r) acc[(o * rows + r) * inner + e] = 0;\n"
                       "    for (long j = 0; j < count; ++j) {\n"
                       "      long id = (long)ids[ids_offset + j * ids_stride];\n"
                       "      id = id < 0 ? 0 : (id >= rows ? rows - 1 : id);\n"
                       "      acc[(o * rows + id) * inner + e] += " +
                       load(dtype, "source[(o * count + j) * inner + e]") +
                       ";\n"
                       "    }\n"
                       "  }\n}\n");
}

std::string Routines::convert(DType from, DType to, bool from_registers) {
  const std::string name = std::string("lt_convert_") + (from_registers ? "registers_" : "") +
                           dtype_name(from) + "_" + dtype_name(to);
  const std::string element =
      from_registers ? "src[offset + i * stride]" : load(from, "src[offset + i * stride]");
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " +
                       (from_registers ? reg(from) : storage(from)) +
                       "* src, long offset, long stride, LT_GLOBAL " + storage(to) +
                       "* dst, long total) {\n" + kEachElement +
                       "    dst[i] = " + store(to, element) + ";\n  }\n}\n");
}

std::string Routines::argsort(DType keys) {
  const std::string name = std::string("lt_argsort_") + dtype_name(keys);
  const bool floating = dtype_info(keys).floating;
  // Whether key x goes before key y.
  const std::string before =
      floating ? "(descending ? (x != x ? y == y : x > y) : (y != y ? x == x : x < y))"
               : "(descending ? y < x : x < y)";
  return add(name, "LT_FN bool " + name + "_before(" + reg(keys) + " x, " + reg(keys) +
                       " y, int descending) {\n  return " + before + ";\n}\n" + "LT_KERNEL void " +
                       name + "(LT_GLOBAL const " + storage(keys) +
                       "* keys, LT_GLOBAL long* out, long rows, long n, int descending) {\n"
                       "  const long total = rows * n;\n" +
                       kEachElement +
                       "    const long base = i - i % n, j = i % n;\n"
                       "    const " +
                       reg(keys) + " kj = " + load(keys, "keys[i]") +
                       ";\n"
                       "    long rank = 0;\n"
                       "    for (long t = 0; t < n; ++t) {\n"
                       "      const " +
                       reg(keys) + " kt = " + load(keys, "keys[base + t]") +
                       ";\n"
                       "      rank += " +
                       name + "_before(kt, kj, descending) || (t < j && !" + name +
                       "_before(kj, kt, descending));\n"
                       "    }\n"
                       "    out[base + rank] = j;\n"
                       "  }\n}\n");
}

std::string Routines::cumsum(DType dtype) {
  const std::string name = std::string("lt_cumsum_") + dtype_name(dtype);
  const bool wrapping = dtype == DType::i64;
  const std::string step = wrapping ? "acc = (long)((ulong)acc + (ulong)in[base + j]);"
                                    : "acc += (double)" + load(dtype, "in[base + j]") + ";";
  return add(name, "LT_KERNEL void " + name + "(LT_GLOBAL const " + storage(dtype) +
                       "* in, LT_GLOBAL " + storage(dtype) +
                       "* out, long rows, long n, int reverse) {\n"
                       "  const long total = rows;\n" +
                       kEachElement + "    const long base = i * n;\n    " +
                       (wrapping ? "long" : "double") +
                       " acc = 0;\n"
                       "    for (long t = 0; t < n; ++t) {\n"
                       "      const long j = reverse ? n - 1 - t : t;\n"
                       "      " +
                       step +
                       "\n"
                       "      out[base + j] = " +
                       store(dtype, "acc") +
                       ";\n"
                       "    }\n"
                       "  }\n}\n");
}

}  // namespace lt::backend::offload
