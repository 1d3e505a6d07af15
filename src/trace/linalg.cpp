// Matrix products: one opaque MatMul node each, run by the GEMM library. Operands may be views:
// a transposed weight is read in place (the library's transpose flag), not copied.
#include <string>

#include "autograd/function.h"
#include "lazytensor/autocast.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "runtime/config.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/autocast.h"
#include "trace/tensor_state.h"
#include "trace/trace.h"

namespace lt {

using autograd::Gradients;

namespace {

void check_operands(const char* op, const ir::NodePtr& a, const ir::NodePtr& b) {
  trace::check_floating(op, a->dtype);
  trace::check_floating(op, b->dtype);
  trace::common_device(op, {a, b});
  // Under autocast, f32 and bf16 operands meet as bf16 copies.
  if (trace::autocasts(a, b)) return;
  if (a->dtype == DType::f16) {
    throw Error(std::string(op) +
                ": no matrix multiply for f16 yet (f32, f64 and bf16 have one); convert with " +
                runtime::in_callers_words("to(lt::DType::f32) or to(lt::DType::bf16)",
                                          "to(lazytensor.float32) or to(lazytensor.bfloat16)"));
  }
  if (a->dtype != b->dtype) {
    throw Error(std::string(op) + ": expected both operands to have the same dtype, got " +
                dtype_name(a->dtype) + " and " + dtype_name(b->dtype));
  }
}

// The shape of the product of a [..., M, K] and b [..., K, N] (both of rank >= 2), batch dims
// broadcast; lt::Error when they cannot be multiplied or the result of `result` dtype does not
// fit the device.
Shape product_shape(const ir::NodePtr& va, const ir::NodePtr& vb, DType result, const char* op) {
  const Shape &sa = va->shape, &sb = vb->shape;
  const int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1];
  const int64_t k2 = sb[sb.rank() - 2], n = sb[sb.rank() - 1];
  if (k != k2) {
    throw Error(std::string(op) + ": shapes " + sa.str() + " and " + sb.str() +
                " cannot be multiplied (" + std::to_string(k) + " columns vs " +
                std::to_string(k2) + " rows)");
  }
  const Shape batch =
      trace::broadcast_shapes(op, Shape(std::vector<int64_t>(sa.begin(), sa.end() - 2)),
                              Shape(std::vector<int64_t>(sb.begin(), sb.end() - 2)));
  std::vector<int64_t> sizes = batch.to_vector();
  sizes.push_back(m);
  sizes.push_back(n);
  const Shape shape(sizes);
  trace::check_fits(op, shape, result, *va->device);
  return shape;
}

// The product node of a and b (one dtype) with a `result` dtype; no gradient recorded.
Tensor product(const Tensor& a, const Tensor& b, DType result, const char* op) {
  ir::NodePtr va = trace::value_of(a, op), vb = trace::value_of(b, op);
  return trace::make_tensor(
      ir::make_node(ir::OpKind::MatMul, result, product_shape(va, vb, result, op), {va, vb}));
}

// Autocast's product: bf16 operands, f32 result.
Tensor mixed_product(const Tensor& a16, const Tensor& b16, const char* op) {
  return product(a16, b16, DType::f32, op);
}

// Whether b is read as the transpose of stored matrices (attention's keys, k.transpose(2, 3)):
// its rows run along memory and its columns across it.
bool reads_transposed(const ir::NodePtr& b) {
  const int rank = b->shape.rank();
  return b->op == ir::OpKind::View && b->view_stride(rank - 2) == 1 &&
         b->view_stride(rank - 1) != 1;
}

// The gradient of b in a @ b from a's transpose and the output gradient g. A shared matrix
// against a batch is one product over all rows, not a batch of products summed afterwards. A
// b that reads stored matrices transposed gets its gradient as the transpose of g^T a, which
// is a^T g: the product then writes it in the stored matrices' layout, and the gradient of the
// transposing view reads it in place instead of gathering it element by element.
template <class Multiply>
Tensor right_gradient(const Tensor& a, const Tensor& g, const Shape& b_shape, bool b_transposed,
                      Multiply multiply) {
  if (b_shape.rank() == 2 && a.dim() > 2) {
    const int64_t k = a.shape()[a.dim() - 1], n = g.shape()[g.dim() - 1];
    const Tensor rows = a.reshape({-1, k}), row_gradients = g.reshape({-1, n});
    if (b_transposed) return multiply(row_gradients.t(), rows).t();
    return multiply(rows.t(), row_gradients);
  }
  if (b_transposed) {
    return autograd::sum_to(multiply(g.transpose(-1, -2), a).transpose(-1, -2), b_shape);
  }
  return autograd::sum_to(multiply(a.transpose(-1, -2), g), b_shape);
}

// Under autocast: the product of bf16 copies into f32, and a backward of the same kind (bf16
// copies of the output gradient against the saved bf16 operands, f32 gradients).
Tensor autocast_product(const Tensor& a, const Tensor& b, const char* op) {
  // Checked before any copy is made: a refused product leaves its operands as they were.
  product_shape(trace::value_of(a, op), trace::value_of(b, op), DType::f32, op);
  const Tensor a16 = trace::autocast_operand(a), b16 = trace::autocast_operand(b);
  Tensor out = mixed_product(a16, b16, op);
  if (!autograd::needs_grad({&a, &b})) return out;
  return autograd::record(
      op, out, {&a, &b},
      [a16 = autograd::saved(a16), b16 = autograd::saved(b16), sa = a.shape(), sb = b.shape(),
       ta = a.dtype(), tb = b.dtype(), b_transposed = reads_transposed(trace::value_of(b, op)),
       op](const Tensor& g) {
        const Tensor g16 = trace::bf16_copy(g);
        const auto multiply = [op](const Tensor& x, const Tensor& y) {
          return mixed_product(x, y, op);
        };
        const Tensor ga = autograd::sum_to(multiply(g16, b16.transpose(-1, -2)), sa);
        return Gradients{ga.to(ta), right_gradient(a16, g16, sb, b_transposed, multiply).to(tb)};
      });
}

// The product of a [..., M, K] and b [..., K, N] (both of rank >= 2), batch dims broadcast.
Tensor batched_product(const Tensor& a, const Tensor& b, const char* op) {
  ir::NodePtr va = trace::value_of(a, op), vb = trace::value_of(b, op);
  check_operands(op, va, vb);
  if (trace::autocasts(va, vb)) return autocast_product(a, b, op);
  Tensor out = product(a, b, va->dtype, op);
  if (!autograd::needs_grad({&a, &b})) return out;
  return autograd::record(
      op, out, {&a, &b},
      [sa_ = autograd::saved(a), sb_ = autograd::saved(b),
       b_transposed = reads_transposed(vb)](const Tensor& g) {
        // In full precision, as recorded, even when backward() runs under autocast.
        const AutocastGuard full_precision(DType::f32);
        const Tensor ga = autograd::sum_to(matmul(g, sb_.transpose(-1, -2)), sa_.shape());
        const auto multiply = [](const Tensor& x, const Tensor& y) { return matmul(x, y); };
        return Gradients{ga, right_gradient(sa_, g, sb_.shape(), b_transposed, multiply)};
      });
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("matmul");
  const int ra = trace::value_of(a, "matmul")->shape.rank();
  const int rb = trace::value_of(b, "matmul")->shape.rank();
  if (ra == 0 || rb == 0) {
    throw Error("matmul: both operands need at least one dim, got shapes " + a.shape().str() +
                " and " + b.shape().str());
  }
  // As torch.matmul: a 1-D operand is a row (left) or a column (right) that is dropped again.
  const Tensor a2 = ra == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = rb == 1 ? b.unsqueeze(1) : b;
  Tensor out = batched_product(a2, b2, "matmul");
  if (rb == 1) out = out.squeeze(-1);
  if (ra == 1) out = out.squeeze(rb == 1 ? -1 : -2);
  // A new value, whatever shape it was given: nothing aliases it.
  if (trace::TensorState* state = trace::find_state(*out.impl())) state->is_view = false;
  return out;
}

Tensor Tensor::matmul(const Tensor& other) const {
  return lt::matmul(*this, other);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  const runtime::TraceScope scope("bmm");
  const Shape sa = trace::value_of(a, "bmm")->shape;
  const Shape sb = trace::value_of(b, "bmm")->shape;
  if (sa.rank() != 3 || sb.rank() != 3 || sa[0] != sb[0]) {
    throw Error("bmm: expected [B, M, K] and [B, K, N] with one B, got " + sa.str() + " and " +
                sb.str());
  }
  return batched_product(a, b, "bmm");
}

namespace {

// linear under autocast: the weight's kept bf16 copy, transposed in place by the GEMM.
Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_operands("linear", trace::value_of(x, "linear"), trace::value_of(weight, "linear"));
  const bool vector = x.dim() == 1;
  // Checked before any copy is made: a refused product leaves its operands as they were.
  product_shape(trace::value_of(vector ? x.unsqueeze(0) : x, "linear"),
                trace::value_of(weight.t(), "linear"), DType::f32, "linear");
  const Tensor x16 = trace::autocast_operand(x), w16 = trace::autocast_operand(weight);
  Tensor product = mixed_product(vector ? x16.unsqueeze(0) : x16, w16.t(), "linear");
  if (vector) product = product.squeeze(0);
  if (autograd::needs_grad({&x, &weight})) {
    product = autograd::record(
        "linear", product, {&x, &weight},
        [x16 = autograd::saved(x16), w16 = autograd::saved(w16), tx = x.dtype(),
         tw = weight.dtype()](const Tensor& g) {
          const int64_t in = w16.shape()[1], out = w16.shape()[0];
          const Tensor g16 = trace::bf16_copy(g).reshape({-1, out});
          const Tensor gx = mixed_product(g16, w16, "linear").reshape(x16.shape().to_vector());
          const Tensor gw = mixed_product(g16.t(), x16.reshape({-1, in}), "linear");
          return Gradients{gx.to(tx), gw.to(tw)};
        });
  }
  return bias.defined() ? product + bias : product;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const runtime::TraceScope scope("linear");
  const Shape sw = trace::value_of(weight, "linear")->shape;
  const Shape sx = trace::value_of(x, "linear")->shape;
  if (sw.rank() != 2) {
    throw Error("linear: the weight must be 2-D [out, in], got shape " + sw.str());
  }
  if (sx.rank() == 0 || sx[sx.rank() - 1] != sw[1]) {
    throw Error("linear: the input of shape " + sx.str() + " does not end in the weight's " +
                std::to_string(sw[1]) + " input features (weight " + sw.str() + ")");
  }
  if (bias.defined()) {
    const Shape sb = trace::value_of(bias, "linear")->shape;
    if (sb.rank() != 1 || sb[0] != sw[0]) {
      throw Error("linear: the bias must have shape [" + std::to_string(sw[0]) + "], got " +
                  sb.str());
    }
  }
  if (trace::autocasts(trace::value_of(x, "linear"), trace::value_of(weight, "linear"))) {
    return autocast_linear(x, weight, bias);
  }
  // The weight's gradient comes out in its own [out, in] layout: g^T x in one product.
  Tensor product;
  {
    const NoGradGuard no_grad;
    product = matmul(x, weight.t());
  }
  if (autograd::needs_grad({&x, &weight})) {
    product = autograd::record(
        "linear", product, {&x, &weight},
        [xs = autograd::saved(x), ws = autograd::saved(weight)](const Tensor& g) {
          const AutocastGuard full_precision(DType::f32);  // as recorded
          const int64_t in = ws.shape()[1], out = ws.shape()[0];
          return Gradients{matmul(g, ws), matmul(g.reshape({-1, out}).t(), xs.reshape({-1, in}))};
        });
  }
  return bias.defined() ? product + bias : product;
}

}  // namespace lt
