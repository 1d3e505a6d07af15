#pragma once
// The routines a step needs on a device besides its fused kernels: strided copies (gathers,
// views, cat), the folds of reductions, matrix products and the opaque ops (index_select,
// index_add, the index checks, argsort, cumsum), each generated for the dtypes it is asked for,
// in OpenCL C or CUDA C++: one text over a small vocabulary of macros that each dialect defines
// (kernels, memory spaces, grid positions, the work-group barrier). A routine is asked for by
// its parameters and answered with its kernel's name; source() is every routine asked for, to
// build with the step's kernels (after the dialect's prelude: the loads and stores of the
// dtypes are the kernels' own).
#include <map>
#include <string>
#include <vector>

#include "backend/kernel_source.h"
#include "lazytensor/dtype.h"

namespace lt::backend::offload {

class Routines {
 public:
  // OpenCL or CUDA (the CPU backend's opaque ops are its own).
  explicit Routines(KernelDialect dialect);

  // dst[dst_offset + idx . dst_strides] = src[src_offset + idx . src_strides] for each index idx
  // of n elements of `sizes` (row-major): (src, dst, n, rank, LtLong8 sizes, LtLong8 src_strides,
  // src_offset, LtLong8 dst_strides, dst_offset).
  std::string copy(size_t element_size);
  // One work-group of kFoldLanes per output: out[o] = the fold of values[o * inner, (o + 1) *
  // inner) by compiler::ReduceKind `kind`, in double: (values, out, outer, inner, kind).
  std::string fold(DType values, DType output);
  // c[b, i, j] = sum_p a[b, i, p] b[b, p, j] over contiguous operands, accumulated in order of p
  // with fused multiply-adds in the operands' register type. Work-groups of kTile x kTile
  // work-items, each group one tile of c (groups = batches x row tiles x column tiles, in that
  // order), reading a and b through local memory a tile of p at a time: (a, b, c, m, n, k).
  std::string matmul(DType operands, DType output);
  static constexpr int kTile = 16;
  // The first id at positions offset + j * stride, j < count, outside [0, size) (and not
  // `ignore` where has_ignore): status = {j, id}, or {-1, 0}; one work-item:
  // (ids, offset, stride, count, size, ignore, has_ignore, status).
  std::string check_ids(DType ids);
  // out[o, j, e] = table[o, ids[j] (clamped: the check fails the step), e] over contiguous
  // elements of `element_size`: (table, ids, ids_offset, ids_stride, out, outer, rows, inner,
  // count).
  std::string index_select(size_t element_size, DType ids);
  // acc[o, ids[j], e] += source[o, j, e], rows zeroed first, j in order: one work-item per
  // (o, e), so the sums are deterministic. acc holds the dtype's registers (f32 for bf16):
  // (source, ids, ids_offset, ids_stride, acc, outer, rows, inner, count).
  std::string index_add(DType dtype, DType ids);
  // dst[i] = src[offset + i * stride] converted, as a Cast kernel converts: (src, offset,
  // stride, dst, n). From a register array (wide dtypes' sums) when `from_registers`.
  std::string convert(DType from, DType to, bool from_registers = false);
  // Each row's stable order, NaN above every number: a rank per element, counted against its
  // row (n^2 comparisons): (keys, out, rows, n, descending).
  std::string argsort(DType keys);
  // Running sums of each row (from its end when reverse), in double (i64: wrapping):
  // (in, out, rows, n, reverse).
  std::string cumsum(DType dtype);

  // Every routine a step could ask for, over every dtype its kind of operand takes (for
  // lt::check_codegen, which compiles them all for a device it does not have): their names.
  std::vector<std::string> add_every_routine();

  std::string source() const;

  static constexpr int kFoldLanes = 64;

 private:
  std::string add(const std::string& name, const std::string& body);
  std::string storage(DType dtype) const;
  std::string reg(DType dtype) const;
  std::string load(DType dtype, const std::string& element) const;
  std::string store(DType dtype, const std::string& value) const;
  KernelDialect dialect_;
  std::map<std::string, std::string> sources_;
};

}  // namespace lt::backend::offload
