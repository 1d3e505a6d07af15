// The ops of a transformer's training step on the device: matrix products, reductions,
// softmax and log-softmax, layer norm, GELU, dropout, NLL loss, embedding, gathers, their
// backwards, and the factories and small reductions that HuggingFace's models call. Each is a
// few engine ops, which the engine fuses and compiles with the rest of the step.
#include <ATen/ExpandUtils.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_index_put_impl.h>
#include <ATen/ops/index.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>

#include "fallback.h"
#include "storage.h"

namespace lazytensor_torch {
namespace {

lt::Tensor value(const at::Tensor& t, const char* op) {
  const Operand o = operand(t, op);
  if (o.tensor.defined()) return o.tensor;
  return lt::full({}, *o.number, to_engine(t.scalar_type(), op));
}

lt::Tensor floating(const lt::Tensor& t) {
  return lt::dtype_is_floating(t.dtype()) ? t : t.to(lt::DType::f64);
}

std::vector<int> reduce_dims(at::OptionalIntArrayRef dim, int64_t rank) {
  std::vector<int> dims;
  if (!dim || dim->empty()) {
    for (int d = 0; d < rank; ++d) dims.push_back(d);
  } else {
    for (int64_t d : *dim) dims.push_back(static_cast<int>(c10::maybe_wrap_dim(d, rank)));
  }
  return dims;
}

lt::Tensor cast(const lt::Tensor& t, at::ScalarType type) {
  const lt::DType dtype = to_engine(type, "lazytensor");
  return t.dtype() == dtype ? t : t.to(dtype);
}

// --- Matrix products.

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  return wrap(lt::matmul(read(a), read(b)));
}

at::Tensor bmm(const at::Tensor& a, const at::Tensor& b) {
  return wrap(lt::bmm(read(a), read(b)));
}

at::Tensor addmm(const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                 const at::Scalar& beta, const at::Scalar& alpha) {
  lt::Tensor product = lt::matmul(read(a), read(b));
  if (alpha.toDouble() != 1.0) product = product * alpha.toDouble();
  if (beta.toDouble() == 0.0) return wrap(product);
  const lt::Tensor bias = value(self, "addmm");
  return wrap(beta.toDouble() == 1.0 ? product + bias : product + bias * beta.toDouble());
}

// --- Reductions.

at::Tensor sum_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype) {
  at::ScalarType type = dtype.value_or(self.scalar_type());
  if (!dtype && at::isIntegralType(type, /*includeBool=*/true)) type = at::kLong;
  const lt::Tensor x = floating(read(self));
  return wrap(cast(x.sum(reduce_dims(dim, self.dim()), keepdim), type));
}

at::Tensor sum_all(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return sum_dims(self, std::nullopt, false, dtype);
}

at::Tensor mean_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype) {
  const at::ScalarType type = dtype.value_or(self.scalar_type());
  return wrap(cast(floating(read(self)).mean(reduce_dims(dim, self.dim()), keepdim), type));
}

at::Tensor all(const at::Tensor& self) {
  return wrap(floating(read(self)).eq(0.0).to(lt::DType::f64).sum().eq(0.0));
}

at::Tensor any(const at::Tensor& self) {
  return wrap(floating(read(self)).ne(0.0).to(lt::DType::f64).sum().ne(0.0));
}

// Integer inputs give the default floating dtype, as in PyTorch.
at::Tensor logsumexp(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  lt::Tensor x = read(self);
  if (!at::isFloatingType(self.scalar_type())) {
    x = x.to(to_engine(at::typeMetaToScalarType(at::get_default_dtype()), "logsumexp"));
  }
  return wrap(x.logsumexp(reduce_dims(dim, self.dim()), keepdim));
}

at::Tensor amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim) {
  return wrap(read(self).max(reduce_dims(dim, self.dim()), keepdim));
}

at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord,
                              at::OptionalIntArrayRef dim, bool keepdim,
                              std::optional<at::ScalarType> dtype) {
  const lt::Tensor x = cast(read(self), dtype.value_or(self.scalar_type()));
  const std::vector<int> dims = reduce_dims(dim, self.dim());
  const double p = ord.toDouble();
  if (p == 2.0) return wrap(x.norm(dims, keepdim));
  if (std::isinf(p) && p > 0) return wrap(x.abs().max(dims, keepdim));
  if (p == 1.0) return wrap(x.abs().sum(dims, keepdim));
  return wrap(x.abs().pow(p).sum(dims, keepdim).pow(1.0 / p));
}

// --- Softmax and log-softmax, and their backwards.

at::Tensor softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  lt::Tensor x = read(self);
  if (half_to_float) x = x.to(lt::DType::f32);
  return wrap(x.softmax(static_cast<int>(dim)));
}

// Softmax whose rows of all -inf give zeros, not NaN (scaled_dot_product_attention's).
at::Tensor safe_softmax(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype) {
  const lt::Tensor x = cast(read(self), dtype.value_or(self.scalar_type()));
  const int d = static_cast<int>(dim);
  const lt::Tensor masked_row = x.max({d}, true).eq(-INFINITY);
  return wrap(lt::where(masked_row, lt::zeros({}, x.dtype()), x.softmax(d)));
}

at::Tensor softmax_backward(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                            at::ScalarType input_dtype) {
  const lt::Tensor g = read(grad_output), y = read(output);
  const int d = static_cast<int>(dim);
  return wrap(cast(y * (g - (g * y).sum({d}, true)), input_dtype));
}

at::Tensor log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float) {
  lt::Tensor x = read(self);
  if (half_to_float) x = x.to(lt::DType::f32);
  return wrap(x.log_softmax(static_cast<int>(dim)));
}

// The last gradient that nll_loss_backward made on this thread, and its sums over the class
// dim, which it knows without reading the gradient: one nonzero element a row. Cross-entropy's
// backward hands that gradient straight to log_softmax's, whose g.sum(dim) would otherwise
// write the [N, C] gradient out and read it back (the BERT head's [1024, 30522]: 25 of a 625 ms
// step). Held weakly, so that a gradient nobody holds is not kept alive for the graph; matched
// by identity, so any other gradient (a hook's, a sum of several) takes the general path.
struct NllGradient {
  std::weak_ptr<lt::TensorImpl> gradient;
  lt::Tensor class_sums;
};
thread_local NllGradient last_nll_gradient;

at::Tensor log_softmax_backward(const at::Tensor& grad_output, const at::Tensor& output,
                                int64_t dim, at::ScalarType input_dtype) {
  const lt::Tensor g = read(grad_output), y = read(output);
  const int d = static_cast<int>(dim);
  lt::Tensor class_sums;
  if (d == y.dim() - 1 && last_nll_gradient.gradient.lock() == g.impl()) {
    class_sums = std::exchange(last_nll_gradient, {}).class_sums;
  } else {
    class_sums = g.sum({d}, true);
  }
  return wrap(cast(g - y.exp() * class_sums, input_dtype));
}

// --- Layer norm.

std::vector<int> trailing_dims(int64_t rank, size_t count) {
  std::vector<int> dims;
  for (int64_t d = rank - static_cast<int64_t>(count); d < rank; ++d) dims.push_back(d);
  return dims;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  const lt::Tensor x = read(input);
  const std::vector<int> dims = trailing_dims(input.dim(), normalized_shape.size());
  const lt::Tensor mean = x.mean(dims, true);
  const lt::Tensor centered = x - mean;
  const lt::Tensor rstd = ((centered * centered).mean(dims, true) + eps).rsqrt();
  lt::Tensor out = centered * rstd;
  if (weight && weight->defined()) out = out * read(*weight);
  if (bias && bias->defined()) out = out + read(*bias);
  return {wrap(out), wrap(mean), wrap(rstd)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, std::array<bool, 3> output_mask) {
  const lt::Tensor g = read(grad_out), x = read(input), r = read(rstd);
  const std::vector<int> dims = trailing_dims(input.dim(), normalized_shape.size());
  const std::vector<int> batch_dims =
      trailing_dims(input.dim() - normalized_shape.size(), input.dim() - normalized_shape.size());
  const lt::Tensor normalized = (x - read(mean)) * r;
  at::Tensor grad_input, grad_weight, grad_bias;
  if (output_mask[0]) {
    const lt::Tensor gw = weight && weight->defined() ? g * read(*weight) : g;
    grad_input =
        wrap(r * (gw - gw.mean(dims, true) - normalized * (gw * normalized).mean(dims, true)));
  }
  if (output_mask[1] && weight && weight->defined()) {
    grad_weight = wrap((g * normalized).sum(batch_dims, false));
  }
  if (output_mask[2] && bias && bias->defined()) grad_bias = wrap(g.sum(batch_dims, false));
  return {grad_input, grad_weight, grad_bias};
}

// --- GELU.

bool tanh_approximation(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "gelu: approximate must be 'none' or 'tanh', got '", approximate, "'");
  return approximate == "tanh";
}

at::Tensor gelu(const at::Tensor& self, c10::string_view approximate) {
  return wrap(lt::gelu(read(self), tanh_approximation(approximate) ? lt::GeluApproximation::tanh
                                                                   : lt::GeluApproximation::none));
}

at::Tensor gelu_backward(const at::Tensor& grad_output, const at::Tensor& self,
                         c10::string_view approximate) {
  const lt::Tensor g = read(grad_output), x = read(self);
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  if (!tanh_approximation(approximate)) {
    // d/dx x Phi(x) = Phi(x) + x phi(x)
    const lt::Tensor cdf = ((x * kInvSqrt2).erf() + 1.0) * 0.5;
    const lt::Tensor pdf = (x * x * -0.5).exp() * kInvSqrt2Pi;
    return wrap(g * (cdf + x * pdf));
  }
  constexpr double kBeta = 0.79788456080286535588;  // sqrt(2 / pi)
  constexpr double kKappa = 0.044715;
  const lt::Tensor inner = (x + x * x * x * kKappa) * kBeta;
  const lt::Tensor t = inner.tanh();
  const lt::Tensor d_inner = (x * x * (3.0 * kKappa) + 1.0) * kBeta;
  return wrap(g * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * d_inner));
}

// --- Dropout: the mask from the engine's counter-based generator, made on the device.

std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const lt::Tensor x = read(input);
  if (!train.value_or(true) || p == 0.0) {
    return {wrap(x), wrap(lt::ones(x.shape(), lt::DType::boolean))};
  }
  const lt::Tensor keep = lt::rand(x.shape()).lt(1.0 - p);
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  return {wrap(x * keep.to(x.dtype()) * scale), wrap(keep)};
}

at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask,
                                   double scale) {
  const lt::Tensor g = read(grad_output);
  return wrap(g * read(mask).to(g.dtype()) * scale);
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator>) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  write(self, lt::rand(lt::Shape(sizes)).lt(p));
  return self;
}

at::Tensor& uniform(at::Tensor& self, double from, double to, std::optional<at::Generator>) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  write(self, lt::rand(lt::Shape(sizes), lt::DType::f64) * (to - from) + from);
  return self;
}

at::Tensor& normal(at::Tensor& self, double mean, double std, std::optional<at::Generator>) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  write(self, lt::randn(lt::Shape(sizes), lt::DType::f64) * std + mean);
  return self;
}

// --- NLL loss over log-probabilities [N, C] (or [C]) and class ids [N].

// The backward's [N, C] gradient: nonzero at each row's target column only.
struct Picked {
  lt::Tensor hit;       // [N, C] bool: the target's column
  lt::Tensor valid;     // [N] bool: the target is not ignore_index
  lt::Tensor in_range;  // [N] f64: 1 where the target is a class (its row of hit holds a true)
};

Picked pick(const lt::Tensor& log_probs, const lt::Tensor& target, int64_t ignore_index) {
  const int64_t classes = log_probs.shape()[log_probs.dim() - 1];
  const lt::Tensor ids = target.to(lt::DType::f64);
  const lt::Tensor columns = lt::arange(static_cast<double>(classes), lt::DType::f64);
  return {columns.eq(ids.unsqueeze(-1)), ids.ne(static_cast<double>(ignore_index)),
          ids.ge(0.0).to(lt::DType::f64) * ids.lt(static_cast<double>(classes)).to(lt::DType::f64)};
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self,
                                                    const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight,
                                                    int64_t reduction, int64_t ignore_index) {
  TORCH_CHECK(!weight || !weight->defined(),
              "nll_loss: class weights are not supported on "
              "the lazytensor device");
  // Each row's log-probability at its target, looked up in the flattened rows (one element a
  // row, positions computed on the device; an ignored row looks up column 0 and counts 0).
  const lt::Tensor logp = read(self);
  const int64_t classes = logp.shape()[logp.dim() - 1];
  const int64_t rows = logp.numel() / std::max<int64_t>(classes, 1);
  const lt::Tensor ids = read(target).to(lt::DType::f64).reshape({rows});
  const lt::Tensor valid = ids.ne(static_cast<double>(ignore_index));
  const lt::Tensor column = lt::where(valid, ids, lt::zeros({}, lt::DType::f64));
  const lt::Tensor positions =
      (lt::arange(static_cast<double>(rows), lt::DType::f64) * static_cast<double>(classes) +
       column)
          .to(lt::DType::i64);
  const lt::Tensor weights = valid.to(logp.dtype());
  const lt::Tensor losses = -logp.reshape({-1}).index_select(0, positions) * weights;
  const lt::Tensor total_weight = weights.sum();
  switch (reduction) {
    case at::Reduction::None:
      return {
          wrap(losses.reshape(std::vector<int64_t>(target.sizes().begin(), target.sizes().end()))),
          wrap(total_weight)};
    case at::Reduction::Sum:
      return {wrap(losses.sum()), wrap(total_weight)};
    default:
      return {wrap(losses.sum() / total_weight), wrap(total_weight)};
  }
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                             const at::Tensor& target, const std::optional<at::Tensor>& weight,
                             int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  TORCH_CHECK(!weight || !weight->defined(),
              "nll_loss_backward: class weights are not "
              "supported on the lazytensor device");
  const lt::Tensor logp = read(self);
  const Picked picked = pick(logp, read(target), ignore_index);
  lt::Tensor scale = read(grad_output) * picked.valid.to(logp.dtype());
  if (reduction == at::Reduction::Mean) scale = scale / read(total_weight);
  if (logp.dim() == 2) scale = scale.unsqueeze(-1);  // one factor per row
  const lt::Tensor gradient = lt::where(picked.hit, -scale, lt::zeros({}, logp.dtype()));
  // Each row's sum over the classes: its one nonzero element (none for a target outside the
  // classes, which the forward refused), so the sum is exact.
  lt::Tensor in_range = picked.in_range.to(logp.dtype());
  if (logp.dim() == 2) in_range = in_range.unsqueeze(-1);
  last_nll_gradient = {gradient.impl(), -scale * in_range};
  return wrap(gradient);
}

// --- Embedding, gathers and indexing.

at::Tensor embedding(const at::Tensor& weight, const at::Tensor& indices, c10::SymInt, bool,
                     bool sparse) {
  TORCH_CHECK(!sparse, "embedding: sparse gradients are not supported on the lazytensor device");
  return wrap(lt::embedding(read(indices), read(weight)));
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices,
                                    c10::SymInt num_weights, c10::SymInt padding_idx,
                                    bool scale_grad_by_freq) {
  TORCH_CHECK(!scale_grad_by_freq,
              "embedding_backward: scale_grad_by_freq is not supported on "
              "the lazytensor device");
  const lt::Tensor ids = read(indices).reshape({-1});
  const lt::Tensor g = read(grad_output);
  const int64_t dim = g.shape()[g.dim() - 1];
  lt::Tensor rows = g.reshape({-1, dim});
  const int64_t padding = padding_idx.expect_int();
  if (padding >= 0) {
    rows = rows *
           ids.to(lt::DType::f64).ne(static_cast<double>(padding)).to(rows.dtype()).unsqueeze(-1);
  }
  return wrap(lt::zeros({num_weights.expect_int(), dim}, g.dtype()).index_add(0, ids, rows));
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  return wrap(read(self).index_select(static_cast<int>(dim), read(index)));
}

// The flattened positions in `self` (contiguous) that gather along dim reads for each element
// of `index`: self[i..., index[i..., j, k...], k...].
lt::Tensor gather_positions(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  const int64_t d = c10::maybe_wrap_dim(dim, self.dim());
  std::vector<int64_t> sizes(index.sizes().begin(), index.sizes().end());
  std::vector<int64_t> strides(self.dim());
  int64_t step = 1;  // the flattened tensor's stride along dim
  for (int64_t k = self.dim() - 1, stride = 1; k >= 0; --k) {
    strides[k] = k == d ? 0 : stride;
    if (k == d) step = stride;
    stride *= self.size(k);
  }
  const lt::Tensor base = lt::as_strided(
      lt::arange(static_cast<double>(self.numel()), lt::DType::f64), sizes, strides, 0);
  return (base + read(index).to(lt::DType::f64) * static_cast<double>(step))
      .to(lt::DType::i64)
      .reshape({-1});
}

at::Tensor gather(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool) {
  std::vector<int64_t> sizes(index.sizes().begin(), index.sizes().end());
  return wrap(read(self)
                  .contiguous()
                  .reshape({-1})
                  .index_select(0, gather_positions(self, dim, index))
                  .reshape(sizes));
}

// gather's backward: src's elements added into self at the positions gather reads.
at::Tensor scatter_add_values(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                              const at::Tensor& src) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  std::vector<int64_t> window(index.sizes().begin(), index.sizes().end());
  const lt::Tensor values = read(src);
  const lt::Tensor picked =
      values.shape() == lt::Shape(window)
          ? values
          : lt::as_strided(values.contiguous(), window,
                           std::vector<int64_t>(src.strides().begin(), src.strides().end()), 0);
  return wrap(read(self)
                  .contiguous()
                  .reshape({-1})
                  .index_add(0, gather_positions(self, dim, index), picked.reshape({-1}))
                  .reshape(sizes));
}

// Advanced indexing with integer index tensors on adjacent dims (x[i, j], what the models use):
// self seen as [leading dims, the indexed dims as one, trailing dims], and each index element's
// row in it. Bool masks (whose result's size depends on the values) and index tensors on dims
// apart are not handled here: their ops fall back to the CPU.
struct RowIndex {
  std::vector<int64_t> grouped;  // self's shape with the indexed dims as one
  int dim = 0;                   // the grouped dim
  lt::Tensor rows;               // [count] i64: the row of each index element (broadcast)
  std::vector<int64_t> result;   // the indexed shape: leading, the indices' broadcast, trailing
};

std::optional<RowIndex> row_index(const at::Tensor& self,
                                  const c10::List<std::optional<at::Tensor>>& indices) {
  std::vector<int64_t> dims;
  std::vector<at::Tensor> index_tensors;
  for (size_t d = 0; d < indices.size(); ++d) {
    const std::optional<at::Tensor> index = indices[d];
    if (!index || !index->defined()) continue;
    const bool integer = at::isIntegralType(index->scalar_type(), /*includeBool=*/false);
    const bool adjacent = dims.empty() || dims.back() == static_cast<int64_t>(d) - 1;
    if (!integer || !adjacent) return std::nullopt;
    dims.push_back(static_cast<int64_t>(d));
    index_tensors.push_back(*index);
  }
  if (dims.empty()) return std::nullopt;
  std::vector<int64_t> shape;
  for (const at::Tensor& t : index_tensors) shape = at::infer_size(shape, t.sizes());
  const int64_t first = dims.front(), last = dims.back();
  int64_t rows = 1;
  lt::Tensor position = lt::zeros({}, lt::DType::f64);
  for (size_t k = 0; k < dims.size(); ++k) {
    const double size = static_cast<double>(self.size(dims[k]));
    const lt::Tensor i = read(index_tensors[k]).to(lt::DType::f64);
    position = position * size + (i + i.lt(0.0).to(lt::DType::f64) * size);  // -1 is the last
    rows *= self.size(dims[k]);
  }
  RowIndex out;
  out.dim = static_cast<int>(first);
  out.grouped.assign(self.sizes().begin(), self.sizes().begin() + first);
  out.grouped.push_back(rows);
  out.grouped.insert(out.grouped.end(), self.sizes().begin() + last + 1, self.sizes().end());
  out.result.assign(self.sizes().begin(), self.sizes().begin() + first);
  out.result.insert(out.result.end(), shape.begin(), shape.end());
  out.result.insert(out.result.end(), self.sizes().begin() + last + 1, self.sizes().end());
  out.rows = position.expand(shape).reshape({-1}).to(lt::DType::i64);
  return out;
}

at::Tensor index_tensor(const at::Tensor& self,
                        const c10::List<std::optional<at::Tensor>>& indices) {
  const std::optional<RowIndex> index = row_index(self, indices);
  if (!index) {
    return at::native::call_fallback_fn<&counted_cpu_fallback, at::_ops::index_Tensor>::call(
        self, indices);
  }
  return wrap(read(self)
                  .reshape(index->grouped)
                  .index_select(index->dim, index->rows)
                  .reshape(index->result));
}

at::Tensor& scatter_add_(at::Tensor& self, int64_t dim, const at::Tensor& index,
                         const at::Tensor& src) {
  write(self, read(scatter_add_values(self, dim, index, src)));
  return self;
}

at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                            const at::Tensor& src, at::Tensor& out) {
  const at::Tensor result = scatter_add_values(self, dim, index, src);
  if (out.sizes() != result.sizes()) out.resize_(result.sizes());
  write(out, read(result));
  return out;
}

// x[i, j] += v (index_put_ with accumulate: index's backward) as an index_add of v's rows;
// without accumulate (a repeated index keeps one of its values), and for the forms
// row_index does not take, the CPU fallback.
at::Tensor& index_put_impl(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                           const at::Tensor& values, bool accumulate, bool unsafe) {
  const std::optional<RowIndex> index =
      accumulate ? row_index(self, indices) : std::optional<RowIndex>();
  if (!index) {
    return at::native::call_fallback_fn<&counted_cpu_fallback, at::_ops::_index_put_impl_>::call(
        self, indices, values, accumulate, unsafe);
  }
  std::vector<int64_t> source = index->grouped;
  source[index->dim] = index->rows.numel();
  const lt::Tensor base = read(self);
  const lt::Tensor v =
      value(values, "index_put_").to(base.dtype()).expand(index->result).reshape(source);
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end());
  write(self, base.reshape(index->grouped).index_add(index->dim, index->rows, v).reshape(sizes));
  return self;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  std::vector<lt::Tensor> values;
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.size(0) == 0) continue;  // torch.cat skips legacy empty tensors
    values.push_back(read(t));
  }
  return wrap(lt::cat(values, static_cast<int>(dim)));
}

at::Tensor bitwise_and(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.scalar_type() == at::kBool && other.scalar_type() == at::kBool,
              "bitwise_and: the lazytensor device has it for bool tensors only");
  return wrap(
      (floating(value(self, "bitwise_and")) * floating(value(other, "bitwise_and"))).ne(0.0));
}

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                       at::Tensor& out) {
  const lt::Tensor values = lt::arange(start.toDouble(), end.toDouble(), step.toDouble(),
                                       to_engine(out.scalar_type(), "arange"));
  if (out.numel() != values.numel()) out.resize_({values.numel()});
  write(out, values);
  return out;
}

at::Tensor reciprocal(const at::Tensor& self) {
  return wrap(1.0 / floating(read(self)));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", mm);
  m.impl("bmm", bmm);
  m.impl("addmm", addmm);
  m.impl("sum.dim_IntList", sum_dims);
  m.impl("sum", sum_all);
  m.impl("mean.dim", mean_dims);
  m.impl("all", all);
  m.impl("any", any);
  m.impl("amax", amax);
  m.impl("logsumexp", logsumexp);
  m.impl("linalg_vector_norm", linalg_vector_norm);
  m.impl("_softmax", softmax);
  m.impl("_safe_softmax", safe_softmax);
  m.impl("_softmax_backward_data", softmax_backward);
  m.impl("_log_softmax", log_softmax);
  m.impl("_log_softmax_backward_data", log_softmax_backward);
  m.impl("native_layer_norm", native_layer_norm);
  m.impl("native_layer_norm_backward", native_layer_norm_backward);
  m.impl("gelu", gelu);
  m.impl("gelu_backward", gelu_backward);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
  m.impl("bernoulli_.float", bernoulli_float);
  m.impl("uniform_", uniform);
  m.impl("normal_", normal);
  m.impl("nll_loss_forward", nll_loss_forward);
  m.impl("nll_loss_backward", nll_loss_backward);
  m.impl("embedding", embedding);
  m.impl("embedding_dense_backward", embedding_dense_backward);
  m.impl("index_select", index_select);
  m.impl("gather", gather);
  m.impl("index.Tensor", index_tensor);
  m.impl("scatter_add", scatter_add_values);
  m.impl("scatter_add_", scatter_add_);
  m.impl("scatter_add.out", scatter_add_out);
  m.impl("_index_put_impl_", index_put_impl);
  m.impl("cat", cat);
  m.impl("bitwise_and.Tensor", bitwise_and);
  m.impl("arange.start_out", arange_out);
  m.impl("reciprocal", reciprocal);
}

}  // namespace lazytensor_torch
