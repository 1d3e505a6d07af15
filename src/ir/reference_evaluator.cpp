// Evaluates IR op by op in double precision with the op table's reference definitions. It
// shares nothing with the compiler or the kernels (dtype_traits.h gives it only the storage
// types), so tests can use it to check them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/reference.h"
#include "runtime/tensor_impl.h"

namespace lt::reference {

namespace {

using Values = std::vector<double>;

// An element as stored, read without the kernels' conversions: bf16 is the upper half of an
// f32's bits.
template <class T>
double value_of(T element) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(element.bits) << 16);
  } else {
    return static_cast<double>(element);
  }
}

// Maps each linear index of `out` to the linear index of `in` broadcast to it.
std::vector<int64_t> broadcast_index(const Shape& in, const Shape& out) {
  const int64_t n = out.numel();
  std::vector<int64_t> index(n);
  const int offset = out.rank() - in.rank();
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0, stride = 1;
    for (int d = out.rank() - 1; d >= 0; --d) {
      const int64_t coord = rest % out[d];
      rest /= out[d];
      const int e = d - offset;
      if (e >= 0) {
        if (in[e] != 1) src += coord * stride;
        stride *= in[e];
      }
    }
    index[i] = src;
  }
  return index;
}

// Rounds to the nearest bf16 (8 significant bits, f32's exponent range), ties to even.
double round_to_bf16(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  int exponent;
  std::frexp(v, &exponent);  // |v| in [2^(exponent-1), 2^exponent)
  // Below f32's smallest normal (2^-126) the spacing stays 2^-133.
  const double spacing = std::ldexp(1.0, std::max(exponent, -125) - 8);
  const double rounded = std::nearbyint(v / spacing) * spacing;  // the default mode: to even
  if (std::fabs(rounded) >= 0x1p128) return std::copysign(INFINITY, v);
  return rounded;
}

// Floating to integer: truncated toward zero; NaN and values out of range give the minimum.
template <class I>
double truncate_to(double v) {
  const double bound = -static_cast<double>(std::numeric_limits<I>::min());
  return v >= -bound && v < bound ? std::trunc(v) : std::numeric_limits<I>::min();
}

// `v`, a value of dtype `from`, converted to dtype `to` as PyTorch converts it.
double convert(DType from, DType to, double v) {
  switch (to) {
    case DType::f32:
      return static_cast<float>(v);
    case DType::f64:
      return v;
    case DType::bf16:
      return round_to_bf16(v);
    case DType::i32:
      // Integers wrap to 32 bits.
      return dtype_is_floating(from)
                 ? truncate_to<int32_t>(v)
                 : static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v)));
    case DType::i64:
      return dtype_is_floating(from) ? truncate_to<int64_t>(v) : v;
    case DType::boolean:
      return v != 0;  // NaN too
    case DType::f16:
      break;
  }
  throw Error(std::string("reference::evaluate: no conversion to dtype ") + dtype_name(to));
}

// bf16's kernels compute each op in f32 and round its result to bf16, as PyTorch does; so does
// the reference. f32 and f64 results stay exact: the reference measures their kernels' error.
double round_result(DType dtype, double v) {
  return dtype_info(dtype).wide_register ? convert(DType::f64, dtype, v) : v;
}

class Evaluator {
 public:
  const Values& eval(const ir::Node& node) {
    auto it = memo_.find(&node);
    if (it != memo_.end()) return it->second;
    Values out = compute(node);
    return memo_.emplace(&node, std::move(out)).first->second;
  }

 private:
  Values compute(const ir::Node& node) {
    switch (ir::op_info(node.op).category) {
      case ir::OpCategory::Leaf:
        return leaf(node);
      case ir::OpCategory::Elementwise:
        return elementwise(node);
      case ir::OpCategory::Reduction:
        return reduction(node);
    }
    return {};
  }

  Values leaf(const ir::Node& node) {
    // A number given to an op holds what the device makes of it: the value in the node's dtype.
    if (node.op != ir::OpKind::DeviceData) return {convert(DType::f64, node.dtype, node.value)};
    const int64_t n = node.shape.numel();
    return visit_dtype(node.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::unique_ptr<T[]> host(new T[n]);
      backend::default_backend().transfer_from_device(node.data->buffer, host.get(), n * sizeof(T));
      Values out(n);
      for (int64_t i = 0; i < n; ++i) out[i] = value_of(host[i]);
      return out;
    });
  }

  Values elementwise(const ir::Node& node) {
    const int64_t n = node.shape.numel();
    const Values* operands[3] = {};
    std::vector<int64_t> index[3];
    for (int i = 0; i < node.num_operands(); ++i) {
      operands[i] = &eval(node.operand(i));
      index[i] = broadcast_index(node.operand(i).shape, node.shape);
    }
    const auto reference = ir::op_info(node.op).reference;
    Values out(n);
    for (int64_t e = 0; e < n; ++e) {
      double args[3] = {0, 0, 0};
      for (int i = 0; i < node.num_operands(); ++i) args[i] = (*operands[i])[index[i][e]];
      out[e] = node.op == ir::OpKind::Cast
                   ? convert(node.operand(0).dtype, node.dtype, args[0])
                   : round_result(node.dtype, reference(args[0], args[1], args[2]));
    }
    return out;
  }

  Values reduction(const ir::Node& node) {
    const ir::Node& in = node.operand(0);
    const Values& values = eval(in);
    const int64_t n_out = node.shape.numel();
    Values acc(n_out, node.op == ir::OpKind::Max ? -std::numeric_limits<double>::infinity() : 0.0);
    std::vector<int64_t> count(n_out, 0);
    const int rank = in.shape.rank();
    for (int64_t e = 0; e < in.shape.numel(); ++e) {
      // The output index: the input's coordinates with reduced dims dropped.
      int64_t rest = e, out_index = 0, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t coord = rest % in.shape[d];
        rest /= in.shape[d];
        if (!(node.reduce_mask() >> d & 1)) {
          out_index += coord * stride;
          stride *= in.shape[d];
        }
      }
      const double v = values[e];
      double& a = acc[out_index];
      switch (node.op) {
        case ir::OpKind::Max:
          a = (std::isnan(v) || std::isnan(a)) ? NAN : std::max(a, v);
          break;
        case ir::OpKind::Norm:
          a += v * v;
          break;
        default:
          a += v;
          break;
      }
      ++count[out_index];
    }
    for (int64_t o = 0; o < n_out; ++o) {
      if (node.op == ir::OpKind::Mean) acc[o] /= static_cast<double>(count[o]);
      if (node.op == ir::OpKind::Norm) acc[o] = std::sqrt(acc[o]);
      acc[o] = round_result(node.dtype, acc[o]);
    }
    return acc;
  }

  std::unordered_map<const ir::Node*, Values> memo_;
};

}  // namespace

std::vector<double> evaluate(const Tensor& tensor) {
  if (!tensor.defined()) throw Error("reference::evaluate: the tensor is undefined");
  Evaluator evaluator;
  return evaluator.eval(*tensor.impl()->value());
}

}  // namespace lt::reference
