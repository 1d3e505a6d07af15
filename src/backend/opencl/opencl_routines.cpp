#include "backend/opencl/opencl_routines.h"

#include <string>

#include "backend/kernel_source.h"
#include "compiler/kernel_program.h"
#include "ir/dtype_traits.h"

namespace lt::backend::opencl {

namespace {

constexpr KernelDialect kCl = KernelDialect::opencl;

std::string storage(DType dtype) {
  return storage_type(dtype, kCl);
}
std::string reg(DType dtype) {
  return register_type(dtype, kCl);
}
std::string load(DType dtype, const std::string& element) {
  return std::string("(") + load_expression(dtype, element, kCl) + ")";
}
std::string store(DType dtype, const std::string& value) {
  return store_expression(dtype, value, kCl);
}
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
    "  for (long i = get_global_id(0); i < total; i += get_global_size(0)) {\n";

}  // namespace

std::string Routines::add(const std::string& name, const std::string& body) {
  sources_.emplace(name, body);
  return name;
}

std::string Routines::source() const {
  std::string out;
  for (const auto& [name, body] : sources_) out += body;
  return out;
}

std::string Routines::copy(size_t element_size) {
  const std::string t = bits_type(element_size);
  const std::string name = "lt_copy_" + std::to_string(element_size);
  return add(name, "__kernel void " + name + "(__global const " + t + "* src, __global " + t +
                       "* dst, long total, int rank, long8 sizes, long8 src_strides, long "
                       "src_offset, long8 dst_strides, long dst_offset) {\n"
                       "  long size[8], ss[8], ds[8];\n"
                       "  vstore8(sizes, 0, size);\n"
                       "  vstore8(src_strides, 0, ss);\n"
                       "  vstore8(dst_strides, 0, ds);\n" +
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
             "__kernel __attribute__((reqd_work_group_size(" + lanes + ", 1, 1))) void " + name +
                 "(__global const " + storage(values) + "* values, __global " + storage(output) +
                 "* out, long outer, long inner, int kind) {\n"
                 "  __local double acc[" +
                 lanes +
                 "];\n"
                 "  __local long at[" +
                 lanes +
                 "];\n"
                 "  const int lane = get_local_id(0);\n"
                 "  for (long o = get_group_id(0); o < outer; o += get_num_groups(0)) {\n"
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
                 "    barrier(CLK_LOCAL_MEM_FENCE);\n"
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
                 "      barrier(CLK_LOCAL_MEM_FENCE);\n"
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
                 "    barrier(CLK_LOCAL_MEM_FENCE);\n"
                 "  }\n}\n");
}

std::string Routines::matmul(DType operands, DType output) {
  const std::string name =
      std::string("lt_matmul_") + dtype_name(operands) + "_" + dtype_name(output);
  const std::string s = storage(operands), r = reg(operands);
  const std::string tile = std::to_string(kTile), lanes = std::to_string(kTile * kTile);
  return add(
      name,
      "__kernel __attribute__((reqd_work_group_size(" + lanes + ", 1, 1))) void " + name +
          "(__global const " + s + "* a, __global const " + s + "* b, __global " + storage(output) +
          "* c, long m, long n, long k) {\n"
          "  __local " +
          r + " a_tile[" + tile + "][" + tile +
          "];\n"
          "  __local " +
          r + " b_tile[" + tile + "][" + tile +
          "];\n"
          "  const int ty = get_local_id(0) / " +
          tile + ", tx = get_local_id(0) % " + tile +
          ";\n"
          "  const long row_tiles = (m + " +
          tile + " - 1) / " + tile + ", col_tiles = (n + " + tile + " - 1) / " + tile +
          ";\n"
          "  const long g = get_group_id(0);\n"
          "  const long batch = g / (row_tiles * col_tiles);\n"
          "  const long row = (g / col_tiles) % row_tiles * " +
          tile +
          " + ty;\n"
          "  const long col = g % col_tiles * " +
          tile +
          " + tx;\n"
          "  __global const " +
          s +
          "* ab = a + batch * m * k;\n"
          "  __global const " +
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
          "    barrier(CLK_LOCAL_MEM_FENCE);\n"
          "    const int steps = k - p0 < " +
          tile + " ? (int)(k - p0) : " + tile +
          ";\n"
          "    for (int p = 0; p < steps; ++p) acc = fma(a_tile[ty][p], b_tile[p][tx], acc);\n"
          "    barrier(CLK_LOCAL_MEM_FENCE);\n"
          "  }\n"
          "  if (row < m && col < n) c[(batch * m + row) * n + col] = " +
          store(output, "acc") + ";\n}\n");
}

std::string Routines::check_ids(DType ids) {
  const std::string name = std::string("lt_check_ids_") + dtype_name(ids);
  return add(name, "__kernel void " + name + "(__global const " + storage(ids) +
                       "* ids, long offset, long stride, long count, long size, long ignore, "
                       "int has_ignore, __global long* status) {\n"
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
  return add(name, "__kernel void " + name + "(__global const " + t + "* table, __global const " +
                       storage(ids) + "* ids, long ids_offset, long ids_stride, __global " + t +
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
  return add(name, "__kernel void " + name + "(__global const " + storage(dtype) +
                       "* source, __global const " + storage(ids) +
                       "* ids, long ids_offset, long ids_stride, __global " + reg(dtype) +
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
  return add(name, "__kernel void " + name + "(__global const " +
                       (from_registers ? reg(from) : storage(from)) +
                       "* src, long offset, long stride, __global " + storage(to) +
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
  return add(name, "static inline bool " + name + "_before(" + reg(keys) + " x, " + reg(keys) +
                       " y, int descending) {\n  return " + before + ";\n}\n" + "__kernel void " +
                       name + "(__global const " + storage(keys) +
                       "* keys, __global long* out, long rows, long n, int descending) {\n"
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
  return add(name, "__kernel void " + name + "(__global const " + storage(dtype) +
                       "* in, __global " + storage(dtype) +
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

}  // namespace lt::backend::opencl
