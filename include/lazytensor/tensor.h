#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "lazytensor/device.h"
#include "lazytensor/dtype.h"
#include "lazytensor/shape.h"

namespace lt {

struct TensorImpl;

// A cheap handle to a lazy tensor. An op records an IR node and returns at once; the value is
// computed at the next mark_step() (or when it is read). Copying a Tensor copies the handle:
// both copies name the same tensor, as two Python references to one torch.Tensor do.
//
// Ops follow PyTorch's names, argument order, broadcasting and floating-point type promotion.
// In-place ops (trailing '_') rebind this tensor to the new value and return *this. A plain
// number passed to an op (a scalar operand, `alpha`, `value`) goes through the scalar policy
// (lt::set_scalar_policy): by default it is a kernel argument that never causes a recompile.
//
// Invalid arguments throw lt::Error at trace time and leave every tensor unchanged.
class Tensor {
 public:
  Tensor() = default;  // undefined: any op on it throws lt::Error

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  Device device() const;  // where the value lives; an op's tensors must share one
  int dim() const { return shape().rank(); }
  int64_t numel() const { return shape().numel(); }
  // True while the tensor holds a recorded computation that has not been launched.
  bool is_pending() const;

  // Reading waits for the value (launching its computation first if it is still pending)
  // and counts one TransferFromDevice. Values convert to the requested element type (float,
  // double, int32_t or int64_t) as to() converts them.
  template <typename T = float>
  std::vector<T> to_vector() const;
  double item() const;  // the tensor must hold exactly one element
  // Copies the numel() * dtype_size(dtype()) bytes of the value, in the tensor's own dtype
  // (bf16 as its 16 bits, bool as bytes 0 and 1), to `dst`.
  void to_host(void* dst) const;
  // The value in place, for zero-copy interchange (DLPack): computed first if pending, then
  // waited for. CPU devices only. While the returned owner lives the engine never writes into
  // this memory (an in-place op on the tensor writes its result elsewhere), so it is a snapshot
  // of the value; the caller must not write into it either.
  struct HostMemory {
    const void* data = nullptr;
    std::shared_ptr<void> owner;
  };
  HostMemory host_memory() const;

  // Arithmetic, maximum and minimum, the unary math ops: see the end of the class.
  Tensor pow(double exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;
  Tensor lerp(const Tensor& end, double weight) const;
  Tensor lerp(const Tensor& end, const Tensor& weight) const;
  Tensor addcmul(const Tensor& tensor1, const Tensor& tensor2, double value = 1.0) const;
  Tensor addcdiv(const Tensor& tensor1, const Tensor& tensor2, double value = 1.0) const;

  Tensor clone() const;
  Tensor to(DType dtype) const;

  // In place: the result must have this tensor's shape (broadcasting may not grow it) and
  // is cast to this tensor's dtype.
  Tensor& pow_(double exponent);
  Tensor& clamp_(double min, double max);
  Tensor& clamp_min_(double min);
  Tensor& clamp_max_(double max);
  Tensor& lerp_(const Tensor& end, double weight);
  Tensor& lerp_(const Tensor& end, const Tensor& weight);
  Tensor& addcmul_(const Tensor& tensor1, const Tensor& tensor2, double value = 1.0);
  Tensor& addcdiv_(const Tensor& tensor1, const Tensor& tensor2, double value = 1.0);
  Tensor& copy_(const Tensor& src);  // src broadcasts to this shape and casts to this dtype
  Tensor& zero_();
  Tensor& fill_(double value);

  // Reductions over all elements (a rank-0 result), or over `dims` (negative dims count from
  // the end) keeping reduced dims as size 1 when `keepdim`.
  Tensor sum() const;
  Tensor sum(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor max() const;  // like torch.max(t) and torch.amax(t, dims)
  Tensor max(const std::vector<int>& dims, bool keepdim = false) const;
  Tensor norm() const;  // L2
  Tensor norm(const std::vector<int>& dims, bool keepdim = false) const;

  // Math and NN ops with a method form in PyTorch (lazytensor/functional.h has the rest).
  Tensor softmax(int dim) const;
  Tensor log_softmax(int dim) const;
  // log(sum(exp(x))) over `dims` (all when empty), computed around the max so that large
  // inputs do not overflow; a row of -inf gives -inf and one holding +inf gives +inf, as
  // torch.logsumexp.
  Tensor logsumexp(const std::vector<int>& dims, bool keepdim = false) const;
  // Variance over `dims` (all when empty), with Bessel's correction when `unbiased`, as
  // torch.var.
  Tensor var(const std::vector<int>& dims = {}, bool unbiased = true, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;

  // Comparisons give bool tensors (after broadcasting and type promotion, as in PyTorch).
  Tensor eq(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(double other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(double other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(double other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(double other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(double other) const;
  // i64 positions of the first maximum: over all elements (rank 0), or along `dim`.
  Tensor argmax() const;
  Tensor argmax(int dim, bool keepdim = false) const;

  // Views: no data moves; kernels read the base through the view's strides. A view is a
  // value, as every lazytensor tensor is: in-place ops on it are refused (its base would not
  // see them), and later in-place updates of its base do not reach it.
  Tensor reshape(const std::vector<int64_t>& shape) const;  // one size may be -1; copies if needed
  Tensor view(const std::vector<int64_t>& shape) const;     // as reshape, but never copies
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor t() const;  // transpose of a matrix (rank <= 2)
  Tensor unsqueeze(int dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int dim) const;
  Tensor expand(const std::vector<int64_t>& shape) const;  // -1 keeps a size
  // Elements start, start + step, ... before end along dim (Python slice bounds: negative
  // counts from the end, out of range clamps).
  Tensor slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor select(int dim, int64_t index) const;  // the slice at index, without dim
  Tensor contiguous() const;                    // a view's elements copied in order

  // Rows (slices along dim) at the positions in `index` (1-D i64 or i32).
  Tensor index_select(int dim, const Tensor& index) const;
  // This tensor with source's slices along dim added at the positions in `index` (1-D i64 or
  // i32; repeated positions add up), each scaled by alpha, as torch.Tensor.index_add.
  Tensor index_add(int dim, const Tensor& index, const Tensor& source, double alpha = 1.0) const;
  Tensor masked_fill(const Tensor& mask, double value) const;

  // Autograd, with libtorch's names (lazytensor/autograd.h has NoGradGuard and lt::grad).
  // Gradients are traced like any op: backward() records them and returns at once.
  Tensor& requires_grad_(bool requires_grad = true);
  bool requires_grad() const;
  bool is_leaf() const;
  // The gradient accumulated by backward() calls; undefined before the first.
  Tensor grad() const;
  Tensor& mutable_grad() const;  // assign an undefined Tensor to clear it
  // Accumulates the gradient of this tensor (single-element, or weighted by `gradient`) into
  // grad() of every leaf it depends on that requires grad.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // the same value, cut off from autograd

  // For the engine.
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;

 public:
  // The elementwise ops of elementwise_ops.def: add, sub, mul, div (`alpha` scales `other`, as
  // in torch.add(input, other, alpha=...)), maximum, minimum, neg, abs, sqrt, rsqrt, exp, log,
  // tanh, sigmoid, relu, erf, sin, cos and sign, with the in-place forms (trailing '_') it lists (as
  // the in-place ops above: the result keeps this tensor's shape and dtype).
#define LT_UNARY_OP(name, Kind) \
  Tensor name() const;          \
  Tensor& name##_();
#define LT_UNARY_FUNCTION(name, Kind) Tensor name() const;
#define LT_UNARY_NO_GRAD(name, Kind) Tensor name() const;
#define LT_BINARY_OP(name, Kind)          \
  Tensor name(const Tensor& other) const; \
  Tensor name(double other) const;        \
  Tensor& name##_(const Tensor& other);   \
  Tensor& name##_(double other);
#define LT_BINARY_ALPHA_OP(name, Kind)                  \
  LT_BINARY_OP(name, Kind)                              \
  Tensor name(const Tensor& other, double alpha) const; \
  Tensor& name##_(const Tensor& other, double alpha);
#define LT_ELEMENTWISE_EXTREMUM(name, Kind) \
  Tensor name(const Tensor& other) const;   \
  Tensor& name##_(const Tensor& other);
#include "lazytensor/elementwise_ops.def"
};

extern template std::vector<float> Tensor::to_vector<float>() const;
extern template std::vector<double> Tensor::to_vector<double>() const;
extern template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
extern template std::vector<int64_t> Tensor::to_vector<int64_t>() const;

namespace detail {
// from_vector's body: `count` elements of `dtype` at `values`, checked against the shape.
Tensor from_values(const char* op, const void* values, size_t count, const Shape& shape,
                   DType dtype);
}  // namespace detail

// Factories. Data is copied into device memory owned by the device (asynchronously: the
// vector may be reused as soon as the call returns). The values' count must be the shape's.
// The dtype is the element type's: f32, f64, i64 (e.g. integer ids) and i32.
Tensor from_vector(const std::vector<float>& values, const Shape& shape);
Tensor from_vector(const std::vector<double>& values, const Shape& shape);
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape);
Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape);
// A braced list takes the dtype of its elements (lt::dtype_of): from_vector({1.f, 2.f}, {2})
// is f32, {1.0, 2.0} f64, {1, 2} i32, {int64_t{1}} i64, {true, false} bool.
template <class T>
Tensor from_vector(std::initializer_list<T> values, const Shape& shape) {
  return detail::from_values("from_vector", values.begin(), values.size(), shape, dtype_of<T>());
}
// shape.numel() elements of `dtype` in its own layout (bf16 as 16 bits, bool as one byte
// each, any nonzero byte meaning true), copied before the call returns.
Tensor from_host(const void* data, const Shape& shape, DType dtype);
// A tensor over memory owned elsewhere (a DLPack producer's), without a copy, on the default
// device (a CPU device). The engine reads it and never writes into it; `release` runs when the
// engine no longer needs it. The memory must keep its contents until then. bool elements must
// be 0 or 1.
Tensor from_external(const void* data, const Shape& shape, DType dtype,
                     std::function<void()> release);
Tensor zeros(const Shape& shape, DType dtype = DType::f32);
// Zeros of t's shape and dtype on t's device, as torch.zeros_like.
Tensor zeros_like(const Tensor& t);
Tensor ones(const Shape& shape, DType dtype = DType::f32);
Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
// Uniform on [0, 1) and standard normal; the same seed gives the same values everywhere.
Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::f32);
// start, start + step, ... below end (above it for a negative step), as torch.arange.
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::i64);
Tensor arange(double end, DType dtype = DType::i64);
Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32);

// Free-function forms of elementwise_ops.def's binary ops, as in torch.*.
#define LT_BINARY_OP(name, Kind) Tensor name(const Tensor& a, const Tensor& b);
#define LT_BINARY_ALPHA_OP(name, Kind) \
  Tensor name(const Tensor& a, const Tensor& b, double alpha = 1.0);
#define LT_ELEMENTWISE_EXTREMUM(name, Kind) Tensor name(const Tensor& a, const Tensor& b);
#include "lazytensor/elementwise_ops.def"

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);

}  // namespace lt
