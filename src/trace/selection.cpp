// Ops that choose elements: comparisons, where, masked_fill, argmax, index_select, embedding,
// cat, arange; each with its derivative beside it.
#include <cmath>
#include <string>

#include "autograd/function.h"
#include "lazytensor/autograd.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/tensor_state.h"
#include "trace/trace.h"

namespace lt {

using autograd::Gradients;
using ir::OpKind;

namespace trace {

ir::NodePtr constant(double value, DType dtype) {
  return ir::make_scalar_node(OpKind::Constant, dtype, value);
}

Tensor index_add_zeros(const Tensor& source, int dim, const Tensor& ids, int64_t size) {
  ir::NodePtr src = value_of(source, "index_add"), index = value_of(ids, "index_add");
  Shape shape = src->shape;
  shape[dim] = size;
  return make_tensor(ir::make_node(OpKind::IndexAdd, src->dtype, shape, {src, index}, {dim, size}));
}

}  // namespace trace

namespace {

using trace::normalize_dim;

void check_index(const char* op, const ir::NodePtr& index) {
  if (index->dtype != DType::i64 && index->dtype != DType::i32) {
    throw Error(std::string(op) + ": indices must be i64 or i32, got " + dtype_name(index->dtype));
  }
}

// A comparison of two values, after promotion, as a bool tensor.
Tensor compare(const ir::NodePtr& a, const ir::NodePtr& b, OpKind kind, const char* op) {
  return trace::make_tensor(trace::cast(trace::elementwise(op, kind, {a, b}), DType::boolean));
}

Tensor compare(const Tensor& self, const Tensor& other, OpKind kind, const char* op) {
  return compare(trace::value_of(self, op), trace::value_of(other, op), kind, op);
}

// As PyTorch: an integer or bool tensor against a number that its dtype cannot hold compares
// as numbers (ids < 2.5, mask == 2), here in f64, exact for integers up to 2^53.
Tensor compare(const Tensor& self, double other, OpKind kind, const char* op) {
  ir::NodePtr v = trace::value_of(self, op);
  if (!dtype_is_floating(v->dtype) && !trace::holds_number(v->dtype, other)) {
    v = trace::cast(v, DType::f64);
  }
  return compare(v, trace::scalar(other, v->dtype, *v->device), kind, op);
}

}  // namespace

#define LT_COMPARISON(method, Kind)                      \
  Tensor Tensor::method(const Tensor& other) const {     \
    const runtime::TraceScope scope(#method);            \
    return compare(*this, other, OpKind::Kind, #method); \
  }                                                      \
  Tensor Tensor::method(double other) const {            \
    const runtime::TraceScope scope(#method);            \
    return compare(*this, other, OpKind::Kind, #method); \
  }
LT_COMPARISON(eq, Eq)
LT_COMPARISON(ne, Ne)
LT_COMPARISON(lt, Lt)
LT_COMPARISON(le, Le)
LT_COMPARISON(gt, Gt)
LT_COMPARISON(ge, Ge)
#undef LT_COMPARISON

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("where");
  ir::NodePtr c = trace::value_of(condition, "where");
  ir::NodePtr va = trace::value_of(a, "where"), vb = trace::value_of(b, "where");
  const Shape shape = trace::broadcast_shapes(
      "where", trace::broadcast_shapes("where", c->shape, va->shape), vb->shape);
  const DType dtype = trace::kernel_dtype("where", OpKind::Where, trace::result_dtype({va, vb}));
  const Device device = trace::common_device("where", {c, va, vb});
  trace::check_fits("where", shape, dtype, device);
  ir::NodePtr node =
      ir::make_node(OpKind::Where, dtype, shape,
                    {trace::cast(c, dtype), trace::cast(va, dtype), trace::cast(vb, dtype)});
  Tensor out = trace::make_tensor(node);
  if (!autograd::needs_grad({&a, &b})) return out;
  return autograd::record(
      "where", out, {&a, &b},
      [cond = autograd::saved(condition), sa = va->shape, sb = vb->shape](const Tensor& g) {
        const Tensor zero = zeros_like(g);
        return Gradients{autograd::sum_to(where(cond, g, zero), sa),
                         autograd::sum_to(where(cond, zero, g), sb)};
      });
}

namespace {

// x with `dim` moved last (a view), and the dim normalized.
std::pair<Tensor, int> dim_last(const Tensor& x, int dim, const char* op) {
  const int d = normalize_dim(op, dim, x.dim());
  return {x.dim() == 0 || d == x.dim() - 1 ? x : x.transpose(d, -1), d};
}
Tensor dim_back(const Tensor& t, int d, int rank) {
  return rank == 0 || d == rank - 1 ? t : t.transpose(d, -1);
}

// One node of a row-by-row op (ArgSort, CumSum) along the last dim of `x`.
Tensor along_rows(const Tensor& x, OpKind kind, DType dtype, std::vector<int64_t> attrs,
                  const char* op) {
  ir::NodePtr v = trace::value_of(x, op);
  trace::check_fits(op, v->shape, dtype, *v->device);
  return trace::make_tensor(ir::make_node(kind, dtype, v->shape, {v}, std::move(attrs)));
}

void check_sortable(const char* op, const Tensor& x) {
  const DType dtype = trace::value_of(x, op)->dtype;
  if (!dtype_has_arithmetic(dtype) && dtype != DType::boolean) trace::check_arithmetic(op, dtype);
}

}  // namespace

Tensor argsort(const Tensor& x, int dim, bool descending) {
  const runtime::TraceScope scope("argsort");
  check_sortable("argsort", x);
  const auto [last, d] = dim_last(x, dim, "argsort");
  const Tensor order =
      along_rows(last, OpKind::ArgSort, DType::i64, {descending ? 1 : 0}, "argsort");
  return dim_back(order, d, x.dim());
}

Tensor take_along_dim(const Tensor& x, const Tensor& indices, int dim) {
  const runtime::TraceScope scope("take_along_dim");
  check_index("take_along_dim", trace::value_of(indices, "take_along_dim"));
  if (indices.dim() != x.dim()) {
    throw Error("take_along_dim: the indices have rank " + std::to_string(indices.dim()) +
                " and the tensor " + std::to_string(x.dim()));
  }
  const auto [last, d] = dim_last(x, dim, "take_along_dim");
  Tensor positions = dim_back(indices, d, x.dim()).to(DType::i64);
  for (int e = 0; e + 1 < last.dim(); ++e) {
    if (positions.shape()[e] != last.shape()[e]) {
      throw Error("take_along_dim: the indices' shape " + indices.shape().str() +
                  " differs from the tensor's " + x.shape().str() + " outside dim " +
                  std::to_string(d));
    }
  }
  const int64_t n = last.dim() == 0 ? 1 : last.shape()[last.dim() - 1];
  const int64_t k = positions.dim() == 0 ? 1 : positions.shape()[positions.dim() - 1];
  const int64_t rows = n == 0 ? 0 : last.numel() / n;
  // Each row's positions offset by the row's start in the flattened tensor: one index_select.
  // A position outside [0, n) would read a neighbouring row: ids the host uploaded are checked
  // now; computed ones are sent past the end, where index_select's own check refuses them.
  const DeviceGuard on_device(x.device());
  if (!trace::check_host_ids("take_along_dim", "index",
                             trace::value_of(positions, "take_along_dim"), n)) {
    positions = where(positions.ge(0.0).bitwise_and(positions.lt(static_cast<double>(n))),
                      positions, full({}, static_cast<double>(rows * n), DType::i64));
  }
  std::vector<int64_t> row_shape = last.shape().to_vector();
  if (!row_shape.empty()) row_shape.back() = 1;
  const Tensor starts = (arange(0.0, static_cast<double>(rows)) * static_cast<double>(n))
                            .reshape(row_shape.empty() ? std::vector<int64_t>{} : row_shape);
  std::vector<int64_t> out_shape = last.shape().to_vector();
  if (!out_shape.empty()) out_shape.back() = k;
  const Tensor flat = last.reshape({last.numel()});
  const Tensor picked =
      flat.index_select(0, (positions + starts).reshape({rows * k})).reshape(out_shape);
  return dim_back(picked, d, x.dim());
}

ValuesIndices sort(const Tensor& x, int dim, bool descending) {
  const runtime::TraceScope scope("sort");
  const Tensor indices = argsort(x, dim, descending);
  return {take_along_dim(x, indices, dim), indices};
}

ValuesIndices topk(const Tensor& x, int64_t k, int dim, bool largest) {
  const runtime::TraceScope scope("topk");
  const int d = normalize_dim("topk", dim, x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.shape()[d];
  if (k < 0 || k > size) {
    throw Error("topk: k = " + std::to_string(k) + " is out of range for dim " + std::to_string(d) +
                " of size " + std::to_string(size));
  }
  Tensor indices = argsort(x, d, largest);
  if (x.dim() > 0) indices = indices.narrow(d, 0, k);
  return {take_along_dim(x, indices, d), indices};
}

namespace {

// Running sums along dim d of x, from the end when `reverse`: the gradient of running sums is
// the running sums of the gradient taken from the end (summed as the forward sums are, not as
// a total less a prefix, which cancels).
Tensor running_sums(const Tensor& x, int d, bool reverse) {
  check_sortable("cumsum", x);
  const auto [last, dim] = dim_last(x, d, "cumsum");
  const Tensor input = dtype_is_floating(last.dtype()) ? last : last.to(DType::i64);
  const Tensor sums = dim_back(
      along_rows(input, OpKind::CumSum, input.dtype(), {reverse ? 1 : 0}, "cumsum"), dim, x.dim());
  if (!autograd::needs_grad({&x})) return sums;
  return autograd::record("cumsum", sums, {&x}, [dim, reverse](const Tensor& g) {
    return Gradients{running_sums(g, dim, !reverse)};
  });
}

}  // namespace

Tensor cumsum(const Tensor& x, int dim) {
  const runtime::TraceScope scope("cumsum");
  return running_sums(x, dim, false);
}

Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  const runtime::TraceScope scope("masked_fill");
  ir::NodePtr v = trace::value_of(*this, "masked_fill");
  ir::NodePtr m = trace::value_of(mask, "masked_fill");
  if (m->dtype != DType::boolean) {
    throw Error(std::string("masked_fill: the mask must be bool, got ") + dtype_name(m->dtype));
  }
  if (trace::broadcast_shapes("masked_fill", v->shape, m->shape) != v->shape) {
    throw Error("masked_fill: the mask of shape " + m->shape.str() +
                " does not broadcast to the tensor's shape " + v->shape.str());
  }
  trace::common_device("masked_fill", {v, m});
  const Tensor filler = trace::make_tensor(
      trace::expand("masked_fill", trace::scalar(value, v->dtype, *v->device), {}, *v->device));
  return where(mask, filler, *this);
}

Tensor Tensor::argmax() const {
  const runtime::TraceScope scope("argmax");
  ir::NodePtr v = trace::value_of(*this, "argmax");
  trace::check_arithmetic("argmax", v->dtype);
  if (v->shape.numel() == 0) throw Error("argmax: the tensor has no elements");
  const uint32_t mask = v->shape.rank() == 0 ? 0 : (uint32_t{1} << v->shape.rank()) - 1;
  return trace::make_tensor(ir::make_node(OpKind::ArgMax, DType::i64, Shape(), {v}, {mask, 0}));
}

Tensor Tensor::argmax(int dim, bool keepdim) const {
  const runtime::TraceScope scope("argmax");
  ir::NodePtr v = trace::value_of(*this, "argmax");
  trace::check_arithmetic("argmax", v->dtype);
  const int d = normalize_dim("argmax", dim, v->shape.rank());
  if (v->shape.rank() > 0 && v->shape[d] == 0) {
    throw Error("argmax: dim " + std::to_string(dim) + " of shape " + v->shape.str() +
                " has no elements");
  }
  std::vector<int64_t> sizes;
  for (int e = 0; e < v->shape.rank(); ++e) {
    if (e != d) {
      sizes.push_back(v->shape[e]);
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  const uint32_t mask = v->shape.rank() == 0 ? 0 : uint32_t{1} << d;
  return trace::make_tensor(
      ir::make_node(OpKind::ArgMax, DType::i64, Shape(sizes), {v}, {mask, keepdim ? 1 : 0}));
}

Tensor Tensor::index_select(int dim, const Tensor& index) const {
  const runtime::TraceScope scope("index_select");
  ir::NodePtr table = trace::value_of(*this, "index_select");
  ir::NodePtr ids = trace::value_of(index, "index_select");
  check_index("index_select", ids);
  if (ids->shape.rank() > 1) {
    throw Error("index_select: the index must be 1-D, got shape " + ids->shape.str());
  }
  if (table->shape.rank() == 0) throw Error("index_select: cannot index a rank-0 tensor");
  const int d = normalize_dim("index_select", dim, table->shape.rank());
  trace::common_device("index_select", {table, ids});
  trace::check_host_ids("index_select", "index", ids, table->shape[d]);
  Shape shape = table->shape;
  shape[d] = ids->shape.numel();
  trace::check_fits("index_select", shape, table->dtype, *table->device);
  Tensor out = trace::make_tensor(
      ir::make_node(OpKind::IndexSelect, table->dtype, shape, {table, ids}, {d}));
  if (!autograd::needs_grad({this})) return out;
  return autograd::record(
      "index_select", out, {this},
      [ids = autograd::saved(index), d, rows = table->shape[d]](const Tensor& g) {
        return Gradients{trace::index_add_zeros(g, d, ids, rows)};
      });
}

Tensor Tensor::index_add(int dim, const Tensor& index, const Tensor& source, double alpha) const {
  const runtime::TraceScope scope("index_add");
  ir::NodePtr self = trace::value_of(*this, "index_add");
  ir::NodePtr ids = trace::value_of(index, "index_add");
  ir::NodePtr src = trace::value_of(source, "index_add");
  check_index("index_add", ids);
  trace::check_arithmetic("index_add", self->dtype);
  if (ids->shape.rank() > 1) {
    throw Error("index_add: the index must be 1-D, got shape " + ids->shape.str());
  }
  if (self->shape.rank() == 0) throw Error("index_add: cannot index a rank-0 tensor");
  const int d = normalize_dim("index_add", dim, self->shape.rank());
  Shape expected = self->shape;
  expected[d] = ids->shape.numel();
  if (src->shape != expected) {
    throw Error("index_add: the source's shape " + src->shape.str() + " must be " + expected.str() +
                " (the tensor's, with dim " + std::to_string(d) + " the index's length)");
  }
  trace::common_device("index_add", {self, ids, src});
  trace::check_host_ids("index_add", "index", ids, self->shape[d]);
  Tensor out;
  {
    const NoGradGuard no_grad;
    const Tensor scaled = alpha == 1.0 ? source.to(dtype()) : source.to(dtype()) * alpha;
    out = *this + trace::index_add_zeros(scaled, d, index, self->shape[d]);
  }
  if (!autograd::needs_grad({this, &source})) return out;
  return autograd::record("index_add", out, {this, &source},
                          [ids = autograd::saved(index), d, alpha](const Tensor& g) {
                            Tensor rows = g.index_select(d, ids);
                            return Gradients{g, alpha == 1.0 ? rows : rows * alpha};
                          });
}

Tensor embedding(const Tensor& first, const Tensor& second, std::optional<int64_t> padding_idx) {
  const runtime::TraceScope scope("embedding");
  trace::value_of(first, "embedding");
  trace::value_of(second, "embedding");
  if (dtype_is_floating(first.dtype()) == dtype_is_floating(second.dtype())) {
    throw Error(std::string("embedding: expected integer ids (i64 or i32) and a floating weight, "
                            "got ") +
                dtype_name(first.dtype()) + " and " + dtype_name(second.dtype()));
  }
  const bool ids_first = !dtype_is_floating(first.dtype());
  const Tensor& ids = ids_first ? first : second;
  const Tensor& weight = ids_first ? second : first;
  ir::NodePtr w = trace::value_of(weight, "embedding");
  ir::NodePtr i = trace::value_of(ids, "embedding");
  if (w->shape.rank() != 2) {
    throw Error("embedding: the weight must be 2-D [num_embeddings, dim], got shape " +
                w->shape.str());
  }
  check_index("embedding", i);
  const int64_t rows = w->shape[0];
  trace::check_host_ids("embedding", "id", i, rows);
  if (padding_idx && (*padding_idx < -rows || *padding_idx >= rows)) {
    throw Error("embedding: padding_idx " + std::to_string(*padding_idx) + " is out of range for " +
                std::to_string(rows) + " embeddings");
  }
  std::vector<int64_t> sizes = i->shape.to_vector();
  sizes.push_back(w->shape[1]);
  Tensor out = weight.index_select(0, ids.reshape({-1})).reshape(sizes);
  // Rows gathered into a new value: nothing aliases it.
  if (trace::TensorState* state = trace::find_state(*out.impl())) state->is_view = false;
  if (padding_idx && out.requires_grad()) {
    // The same values, but positions holding the padding id pass no gradient to its row.
    const int64_t pad = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
    out = where(ids.eq(static_cast<double>(pad)).unsqueeze(-1), out.detach(), out);
  }
  return out;
}

Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  const runtime::TraceScope scope("cat");
  if (tensors.empty()) throw Error("cat: expected a non-empty list of tensors");
  std::vector<ir::NodePtr> values;
  for (const Tensor& t : tensors) values.push_back(trace::value_of(t, "cat"));
  const Shape& first = values[0]->shape;
  if (first.rank() == 0) throw Error("cat: rank-0 tensors cannot be concatenated");
  const int d = normalize_dim("cat", dim, first.rank());
  Shape shape = first;
  shape[d] = 0;
  DType dtype = values[0]->dtype;
  for (size_t k = 0; k < values.size(); ++k) {
    const Shape& s = values[k]->shape;
    bool same = s.rank() == first.rank();
    for (int e = 0; same && e < s.rank(); ++e) same = e == d || s[e] == first[e];
    if (!same) {
      throw Error("cat: tensor " + std::to_string(k) + " has shape " + s.str() +
                  ", which does not match " + first.str() + " except in dim " + std::to_string(d));
    }
    shape[d] += s[d];
    dtype = promote_types(dtype, values[k]->dtype);
    if (*values[k]->device != *values[0]->device) {
      throw Error("cat: expected all tensors on one device, got " + values[0]->device->str() +
                  " and " + values[k]->device->str());
    }
  }
  trace::check_fits("cat", shape, dtype, *values[0]->device);
  for (ir::NodePtr& v : values) v = trace::cast(v, dtype);
  Tensor out = trace::make_tensor(ir::make_node(OpKind::Cat, dtype, shape, values, {d}));
  bool any = false;
  for (const Tensor& t : tensors) any = any || autograd::needs_grad({&t});
  if (!any) return out;
  std::vector<int64_t> sizes;
  for (const ir::NodePtr& v : values) sizes.push_back(v->shape[d]);
  return autograd::record("cat", out, tensors, [d, sizes](const Tensor& g) {
    Gradients grads;
    int64_t at = 0;
    for (int64_t size : sizes) {
      grads.push_back(g.slice(d, at, at + size));
      at += size;
    }
    return grads;
  });
}

Tensor arange(double start, double end, double step, DType dtype) {
  const runtime::TraceScope scope("arange");
  trace::check_dtype("arange", dtype);
  if (step == 0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    throw Error("arange: start, end and step must be finite and step nonzero");
  }
  const double count = std::ceil((end - start) / step);
  const int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  const Device device = default_device();
  const Shape shape({n});
  trace::check_fits("arange", shape, dtype, device);
  ir::NodePtr positions = ir::make_node(OpKind::Iota, DType::f64, shape, {});
  positions->device = device;
  ir::NodePtr values = ir::make_node(OpKind::Add, DType::f64, shape,
                                     {ir::make_node(OpKind::Mul, DType::f64, shape,
                                                    {positions, trace::constant(step, DType::f64)}),
                                      trace::constant(start, DType::f64)});
  return trace::make_tensor(trace::cast(values, dtype));
}

Tensor arange(double end, DType dtype) {
  return arange(0.0, end, 1.0, dtype);
}

}  // namespace lt
