#pragma once
// Building IR for the Tensor API: operand checks, broadcasting, dtype promotion and the
// scalar policy. Every check runs before anything is created or rebound, so a failing op
// leaves every tensor as it was.
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "ir/node.h"
#include "lazytensor/tensor.h"

namespace lt::trace {

// The IR value of `t`; throws if t is undefined or its dtype has no kernels.
ir::NodePtr value_of(const Tensor& t, const char* op);
// A plain number used by an op on `dtype` values on `device`, as the scalar policy says.
ir::NodePtr scalar(double value, DType dtype, const Device& device);
// The device of the operands that have one (numbers have none); lt::Error naming `op` if they
// differ. The default device when none has one.
Device common_device(const char* op, std::initializer_list<ir::NodePtr> operands);
// The broadcast of two shapes, or lt::Error naming `op` and both shapes.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);
// An elementwise node over `operands`, broadcast to a common shape and promoted to a common
// dtype (inserting casts).
ir::NodePtr elementwise(const char* op, ir::OpKind kind,
                        std::initializer_list<ir::NodePtr> operands);
// The dtype PyTorch gives an op over these operands.
DType result_dtype(std::initializer_list<ir::NodePtr> operands);
ir::NodePtr cast(const ir::NodePtr& value, DType dtype);
// `value` broadcast to `shape` (which must be reachable by broadcasting), on `device`.
ir::NodePtr expand(const char* op, const ir::NodePtr& value, const Shape& shape,
                   const Device& device);

Tensor make_tensor(ir::NodePtr node);
// Zeros of `source`'s shape with dim `dim` of size `size`, with source's slices along dim added
// at positions `ids` (1-D integer): the gradient of index_select and of slice. Not recorded.
Tensor index_add_zeros(const Tensor& source, int dim, const Tensor& ids, int64_t size);
// A number fixed in the graph's structure (a shape-derived factor, not a user's scalar).
ir::NodePtr constant(double value, DType dtype);
// In place: `self` takes `result`, which must have self's shape; cast to self's dtype.
Tensor& assign(Tensor& self, const ir::NodePtr& result, const char* op);

// Rounds a and b (floating, any shapes) to bf16 stochastically with the two halves of one
// draw's random bits: the kernel computing both (an optimizer's weights and second moments)
// hashes each position once.
std::pair<Tensor, Tensor> stochastic_round_pair(const Tensor& a, const Tensor& b);
// Block-wise 8-bit quantization's maps (op_table.def): the values of codes (any dtype, 0..255)
// as f32, and the nearest codes of f32 values (normalized to [-1, 1] or [0, 1]) as u8.
Tensor dequantize8(const Tensor& codes, bool is_unsigned);
Tensor quantize8(const Tensor& normalized, bool is_unsigned);
// Whether `device` keeps a row group's row-local temporaries out of its memory (the CPU's
// workers hold a block's rows of them in scratch): a value computed once for a reduction over
// rows and for what reads it after costs no memory there, where elsewhere it is a full buffer.
bool keeps_row_local_temporaries(const Device& device);
// In place, into self's own buffer when it holds device data: the kernel computing `value`
// reads the old value (where(true, value, old), a load the compiler drops), which makes the
// old buffer a donation candidate. For tensors that are overwritten without being read (mixed
// precision's bf16 weights, made from the f32 masters), which would otherwise get a fresh
// buffer every step.
Tensor& overwrite(Tensor& self, const Tensor& value);

// Computes `tensors` now, in one graph of their own (named `op` in messages), so that each
// holds device data; does not wait for the device.
void compute_now(const std::vector<Tensor>& tensors, const char* op);

void check_shape(const char* op, const Shape& shape);
// `dim` in [-rank, rank) (a rank-0 tensor takes 0 and -1, as PyTorch's) as a dim in [0, rank);
// lt::Error naming `op`, the dim and the valid range otherwise.
int normalize_dim(const char* op, int dim, int rank);
// Reduction dims (negative counts from the end; none means all, as torch.sum(x, dim=[])) as a
// mask of the dims of `shape`; lt::Error naming `op` for a dim out of range or given twice.
uint32_t reduce_mask(const char* op, const Shape& shape, const std::vector<int>& dims);
void check_dtype(const char* op, DType dtype);
// Throws unless ops that compute (not only move or convert values) exist for `dtype`.
void check_arithmetic(const char* op, DType dtype);
// Throws unless `dtype` is a floating dtype (matrix products, means, norms: PyTorch's ops
// defined on floating values only).
void check_floating(const char* op, DType dtype);
// The dtype that elementwise op `kind` computes operands of (promoted) dtype `dtype` in: the
// dtype itself where the op has a kernel for it; i64 for bool operands of an integer op (as
// PyTorch's true + 1); f32, PyTorch's default dtype, for integer or bool operands of an op
// defined on floating values (exp, true division). Throws where there is none (bitwise ops on
// floating values, arithmetic on u8).
DType kernel_dtype(const char* op, ir::OpKind kind, DType dtype);
// Whether a number is one of the values of integer or bool dtype `dtype` (whole, finite and in
// range: 1e20 and infinity are not an i64's).
bool holds_number(DType dtype, double value);
// Throws if a value of this shape and dtype could never fit in the device's memory.
void check_fits(const char* op, const Shape& shape, DType dtype, const Device& device);
// Ids the host uploaded (perhaps reshaped or permuted) are checked here, as the op is traced:
// each must be in [0, size) or equal to `ignore`; lt::IndexError names the op, the value, the
// valid range and the position. Returns false when the host cannot tell (ids computed on the
// device, or values between the ignored id and 0), and then the kernel checks them.
bool check_host_ids(const char* op, const char* what, const ir::NodePtr& ids, int64_t size,
                    std::optional<int64_t> ignore = std::nullopt);

}  // namespace lt::trace
