// Matrix products: one opaque MatMul node each, run by the GEMM library. Operands may be views:
// a transposed weight is read in place (the library's transpose flag), not copied.
#include <string>

#include "autograd/function.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"

namespace lt {

using autograd::Gradients;

namespace {

void check_operands(const char* op, const ir::NodePtr& a, const ir::NodePtr& b) {
  trace::check_arithmetic(op, a->dtype);
  if (a->dtype == DType::f16) {
    throw Error(std::string(op) +
                ": no matrix multiply for f16 yet (f32, f64 and bf16 have one); convert with "
                "to(lt::DType::f32) or to(lt::DType::bf16)");
  }
  if (a->dtype != b->dtype) {
    throw Error(std::string(op) + ": expected both operands to have the same dtype, got " +
                dtype_name(a->dtype) + " and " + dtype_name(b->dtype));
  }
  trace::common_device(op, {a, b});
}

// The product of a [..., M, K] and b [..., K, N] (both of rank >= 2), batch dims broadcast.
Tensor batched_product(const Tensor& a, const Tensor& b, const char* op) {
  ir::NodePtr va = trace::value_of(a, op), vb = trace::value_of(b, op);
  check_operands(op, va, vb);
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
  trace::check_fits(op, shape, va->dtype, *va->device);
  Tensor out = trace::make_tensor(ir::make_node(ir::OpKind::MatMul, va->dtype, shape, {va, vb}));
  if (!autograd::needs_grad({&a, &b})) return out;
  return autograd::record(
      op, out, {&a, &b}, [sa_ = autograd::saved(a), sb_ = autograd::saved(b)](const Tensor& g) {
        const Tensor ga = autograd::sum_to(matmul(g, sb_.transpose(-1, -2)), sa_.shape());
        Tensor gb;
        if (sb_.dim() == 2 && sa_.dim() > 2) {
          // A shared matrix against a batch: one product over all rows, not a batch of
          // products summed afterwards.
          const int64_t k = sa_.shape()[sa_.dim() - 1], n = g.shape()[g.dim() - 1];
          gb = matmul(sa_.reshape({-1, k}).t(), g.reshape({-1, n}));
        } else {
          gb = autograd::sum_to(matmul(sa_.transpose(-1, -2), g), sb_.shape());
        }
        return Gradients{ga, gb};
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
  out.impl()->is_view = false;  // a new value, whatever shape it was given: nothing aliases it
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
          const int64_t in = ws.shape()[1], out = ws.shape()[0];
          return Gradients{matmul(g, ws), matmul(g.reshape({-1, out}).t(), xs.reshape({-1, in}))};
        });
  }
  return bias.defined() ? product + bias : product;
}

}  // namespace lt
