// Evaluates IR op by op in double precision with the op table's reference definitions. It
// shares nothing with the compiler or the kernels, so tests can use it to check them.
#include <cmath>
#include <limits>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "lazytensor/error.h"
#include "lazytensor/reference.h"
#include "runtime/tensor_impl.h"

namespace lt::reference {

namespace {

using Values = std::vector<double>;

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

double round_to(DType dtype, double v) {
  return dtype == DType::f32 ? static_cast<double>(static_cast<float>(v)) : v;
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
    if (node.op != ir::OpKind::DeviceData) return {node.value};
    const int64_t n = node.shape.numel();
    Values out(n);
    if (node.dtype == DType::f32) {
      std::vector<float> host(n);
      backend::default_backend().transfer_from_device(node.data->buffer, host.data(), n * 4);
      std::copy(host.begin(), host.end(), out.begin());
    } else {
      backend::default_backend().transfer_from_device(node.data->buffer, out.data(), n * 8);
    }
    return out;
  }

  Values elementwise(const ir::Node& node) {
    const int64_t n = node.shape.numel();
    const Values* operands[3] = {};
    std::vector<int64_t> index[3];
    for (int i = 0; i < node.num_operands; ++i) {
      operands[i] = &eval(node.operand(i));
      index[i] = broadcast_index(node.operand(i).shape, node.shape);
    }
    const auto reference = ir::op_info(node.op).reference;
    Values out(n);
    for (int64_t e = 0; e < n; ++e) {
      double args[3] = {0, 0, 0};
      for (int i = 0; i < node.num_operands; ++i) args[i] = (*operands[i])[index[i][e]];
      out[e] = node.op == ir::OpKind::Cast ? round_to(node.dtype, args[0])
                                           : reference(args[0], args[1], args[2]);
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
        if (!(node.reduce_mask >> d & 1)) {
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
