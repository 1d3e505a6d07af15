// Evaluates a graph op by op in double precision with the op table's reference definitions. It
// does not use the kernels' expressions or conversions (of dtype_traits.h it takes only the
// dtype facts) and reads no device memory (the caller reads the leaves), so tests can use it to
// check the kernels.
#include "ir/reference_evaluator.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt::ir {

namespace {

using Values = std::vector<double>;

// The largest arity in the op table (the ternary ops).
constexpr int kMaxOperands = 3;

// Marks a node whose values are kept to the end (a graph output) and a node that is no input.
constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

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

// Rounds to the nearest f16, ties to even. IEEE binary16: 11 significant bits, subnormals
// spaced 2^-24, overflow past 65520 (the midpoint between the largest f16, 65504, and 2^16) to
// infinity.
double round_to_f16(double v) {
  if (!std::isfinite(v) || v == 0) return v;
  int exponent;
  std::frexp(v, &exponent);
  const double spacing = std::ldexp(1.0, std::max(exponent, -13) - 11);
  const double rounded = std::nearbyint(v / spacing) * spacing;
  if (std::fabs(rounded) > 65504) return std::copysign(INFINITY, v);
  return rounded;
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
    case DType::u8:   // wraps, as i32 does
      return static_cast<uint8_t>(dtype_is_floating(from) ? truncate_to<int64_t>(v)
                                                          : static_cast<int64_t>(v));
    case DType::f16:
      return round_to_f16(v);
  }
  throw Error(std::string("reference::evaluate: no conversion to dtype ") + dtype_name(to));
}

// bf16's kernels compute each op in f32 and round its result to bf16, as PyTorch does; so does
// the reference. f32 and f64 results stay exact: the reference measures their kernels' error.
// Integer and bool results are whole numbers of their dtype (an integer power's 2^-1 is 0).
double round_result(DType dtype, double v) {
  return dtype_info(dtype).wide_register || !dtype_is_floating(dtype)
             ? convert(DType::f64, dtype, v)
             : v;
}

// a // b or a % b of integer values, as op_semantics.h defines them (b = 0 included).
double integer_division(OpKind op, double a, double b) {
  const auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  return static_cast<double>(op == OpKind::FloorDivide ? lt_kernel::lt_floor_divide(x, y)
                                                       : lt_kernel::lt_remainder(x, y));
}

// Walks a graph's nodes in order, holding the values of those a later node still reads.
class Evaluator {
 public:
  Evaluator(const Graph& graph, const std::vector<Values>& input_values)
      : graph_(graph),
        input_values_(input_values),
        values_(graph.nodes.size()),
        input_of_(graph.nodes.size(), kNone),
        last_use_(graph.nodes.size()) {
    if (input_values.size() != graph.inputs.size()) {
      throw Error("reference::evaluate: the graph has " + std::to_string(graph.inputs.size()) +
                  " inputs, given values for " + std::to_string(input_values.size()));
    }
    for (uint32_t j = 0; j < graph.inputs.size(); ++j) input_of_[graph.inputs[j]] = j;
    // Nodes are in topological order, so the last user to be seen is the last to read.
    for (uint32_t i = 0; i < graph.nodes.size(); ++i) {
      last_use_[i] = i;  // read by nobody: dropped as soon as computed
      for (int k = 0; k < graph.num_operands(i); ++k) last_use_[graph.operand(i, k)] = i;
    }
    for (uint32_t out : graph.outputs) last_use_[out] = kNone;
  }

  std::vector<Values> run() {
    for (uint32_t i = 0; i < graph_.nodes.size(); ++i) {
      values_[i] = compute(i);
      for (int k = 0; k < graph_.num_operands(i); ++k) release_after(graph_.operand(i, k), i);
      release_after(i, i);
    }
    std::vector<Values> out;
    out.reserve(graph_.outputs.size());
    for (uint32_t index : graph_.outputs) out.push_back(std::move(values_[index]));
    return out;
  }

 private:
  // Frees node `index`'s values if node `reader` was the last to read them.
  void release_after(uint32_t index, uint32_t reader) {
    if (last_use_[index] == reader) Values().swap(values_[index]);
  }

  Values compute(uint32_t i) {
    switch (op_info(graph_.node(i).op).category) {
      case OpCategory::Leaf:
        return leaf(i);
      case OpCategory::Elementwise:
        return elementwise(i);
      case OpCategory::Reduction:
        return reduction(i);
      case OpCategory::View:
        return view(i);
      case OpCategory::Opaque:
        return opaque(i);
    }
    return {};
  }

  Values leaf(uint32_t i) {
    const Node& node = graph_.node(i);
    // A number given to an op holds what the device makes of it: the value in the node's dtype,
    // or in its register type when that is wider (bf16 ops take f32 numbers, as PyTorch's).
    if (node.op != OpKind::DeviceData) {
      if (dtype_info(node.dtype).wide_register) return {static_cast<float>(node.value)};
      return {convert(DType::f64, node.dtype, node.value)};
    }
    if (input_of_[i] == kNone) {
      throw Error("reference::evaluate: node " + std::to_string(i) +
                  " reads device data but is not among the graph's inputs");
    }
    const Values& values = input_values_[input_of_[i]];
    if (static_cast<int64_t>(values.size()) != node.shape.numel()) {
      throw Error("reference::evaluate: input " + std::to_string(input_of_[i]) + " has " +
                  std::to_string(values.size()) + " values for " +
                  std::to_string(node.shape.numel()) + " elements");
    }
    return values;
  }

  Values elementwise(uint32_t i) {
    const Node& node = graph_.node(i);
    const int arity = graph_.num_operands(i);
    if (arity > kMaxOperands) {
      throw Error(std::string("reference::evaluate: ") + op_info(node.op).name + " has " +
                  std::to_string(arity) + " operands");
    }
    std::array<const Values*, kMaxOperands> operands{};
    // Empty where the operand has the node's shape: its index is the element's own.
    std::array<std::vector<int64_t>, kMaxOperands> index;
    for (int k = 0; k < arity; ++k) {
      const uint32_t operand = graph_.operand(i, k);
      operands[k] = &values_[operand];
      const Shape& shape = graph_.node(operand).shape;
      if (!(shape == node.shape)) index[k] = broadcast_index(shape, node.shape);
    }
    if (node.op == OpKind::Iota) {
      Values out(node.shape.numel());
      for (size_t e = 0; e < out.size(); ++e) out[e] = static_cast<double>(e);
      return out;
    }
    if (node.op == OpKind::StochasticRound) {
      // The kernels' own function: the random bits are the definition, not an approximation.
      Values out(node.shape.numel());
      for (size_t e = 0; e < out.size(); ++e) {
        const double x = (*operands[0])[index[0].empty() ? e : index[0][e]];
        const double key = (*operands[1])[index[1].empty() ? e : index[1][e]];
        out[e] = lt_kernel::lt_round_bf16_stochastic(x, key, static_cast<unsigned int>(e),
                                                     static_cast<int>(node.attrs[0]));
      }
      return out;
    }
    if (node.op == OpKind::Bernoulli) {
      Values out(node.shape.numel());
      for (size_t e = 0; e < out.size(); ++e) {
        const double key = (*operands[0])[index[0].empty() ? e : index[0][e]];
        const double probability = (*operands[1])[index[1].empty() ? e : index[1][e]];
        out[e] = lt_kernel::lt_bernoulli<double>(key, probability, static_cast<unsigned int>(e));
      }
      return out;
    }
    const DType from =
        node.op == OpKind::Cast ? graph_.node(graph_.operand(i, 0)).dtype : node.dtype;
    const auto reference = op_info(node.op).reference;
    const int64_t n = node.shape.numel();
    // Integer // and % by 0 are defined by the kernels (op_semantics.h), not by the floating
    // rows' reference.
    const bool whole_division = !dtype_is_floating(node.dtype) &&
                                (node.op == OpKind::FloorDivide || node.op == OpKind::Remainder);
    Values out(n);
    for (int64_t e = 0; e < n; ++e) {
      std::array<double, kMaxOperands> args{};
      for (int k = 0; k < arity; ++k) args[k] = (*operands[k])[index[k].empty() ? e : index[k][e]];
      out[e] = node.op == OpKind::Cast ? convert(from, node.dtype, args[0])
               : whole_division        ? integer_division(node.op, args[0], args[1])
                                : round_result(node.dtype, reference(args[0], args[1], args[2]));
    }
    return out;
  }

  Values reduction(uint32_t i) {
    const Node& node = graph_.node(i);
    const uint32_t operand = graph_.operand(i, 0);
    const Shape& in = graph_.node(operand).shape;
    const Values& values = values_[operand];
    const int64_t n_out = node.shape.numel();
    Values acc(n_out, node.op == OpKind::Max || node.op == OpKind::ArgMax
                          ? -std::numeric_limits<double>::infinity()
                          : 0.0);
    std::vector<int64_t> count(n_out, 0);
    Values best(n_out, 0);  // ArgMax: the position of acc within its run
    const int rank = in.rank();
    for (int64_t e = 0; e < in.numel(); ++e) {
      // The output index: the input's coordinates with reduced dims dropped.
      int64_t rest = e, out_index = 0, stride = 1;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t coord = rest % in[d];
        rest /= in[d];
        if (!(node.reduce_mask() >> d & 1)) {
          out_index += coord * stride;
          stride *= in[d];
        }
      }
      const double v = values[e];
      double& a = acc[out_index];
      switch (node.op) {
        case OpKind::Max:
          a = (std::isnan(v) || std::isnan(a)) ? NAN : std::max(a, v);
          break;
        case OpKind::Norm:
          a += v * v;
          break;
        case OpKind::ArgMax:
          // The first maximum, a NaN being larger than anything, as torch.argmax.
          if (!std::isnan(a) && (std::isnan(v) || v > a || count[out_index] == 0)) {
            a = v;
            best[out_index] = static_cast<double>(count[out_index]);
          }
          break;
        default:
          a += v;
          break;
      }
      ++count[out_index];
    }
    for (int64_t o = 0; o < n_out; ++o) {
      if (node.op == OpKind::Mean) acc[o] /= static_cast<double>(count[o]);
      if (node.op == OpKind::Norm) acc[o] = std::sqrt(acc[o]);
      if (node.op == OpKind::ArgMax) acc[o] = best[o];
      acc[o] = round_result(node.dtype, acc[o]);
    }
    return acc;
  }

  // Element e of the view: its operand's value at offset + sum of coordinate * stride.
  Values view(uint32_t i) {
    const Node& node = graph_.node(i);
    const Values& source = values_[graph_.operand(i, 0)];
    const int64_t n = node.shape.numel();
    Values out(n);
    for (int64_t e = 0; e < n; ++e) {
      int64_t rest = e, at = node.view_offset();
      for (int d = node.shape.rank() - 1; d >= 0; --d) {
        at += rest % node.shape[d] * node.view_stride(d);
        rest /= node.shape[d];
      }
      out[e] = source[at];
    }
    return out;
  }

  Values opaque(uint32_t i) {
    switch (graph_.node(i).op) {
      case OpKind::MatMul:
        return matmul(i);
      case OpKind::IndexSelect:
      case OpKind::IndexAdd:
        return index_op(i);
      case OpKind::Cat:
        return cat(i);
      case OpKind::CheckIndex:
        return check_index(i);
      case OpKind::ArgSort:
      case OpKind::CumSum:
        return along_rows(i);
      default:
        throw Error(std::string("reference::evaluate: no reference for op ") +
                    op_info(graph_.node(i).op).name);
    }
  }

  // Batched, broadcast matrix products, summed in double.
  Values matmul(uint32_t i) {
    const Node& node = graph_.node(i);
    const uint32_t ia = graph_.operand(i, 0), ib = graph_.operand(i, 1);
    const Shape &sa = graph_.node(ia).shape, &sb = graph_.node(ib).shape;
    const int rank = node.shape.rank();
    const int64_t m = node.shape[rank - 2], n = node.shape[rank - 1], k = sa[sa.rank() - 1];
    auto batch_of = [](const Shape& s) {
      return Shape(std::vector<int64_t>(s.begin(), s.end() - 2));
    };
    const Shape batch = batch_of(node.shape);
    const std::vector<int64_t> a_batch = broadcast_index(batch_of(sa), batch);
    const std::vector<int64_t> b_batch = broadcast_index(batch_of(sb), batch);
    const Values &a = values_[ia], &b = values_[ib];
    Values out(node.shape.numel());
    for (int64_t p = 0; p < batch.numel(); ++p) {
      const double* pa = a.data() + a_batch[p] * m * k;
      const double* pb = b.data() + b_batch[p] * k * n;
      double* pc = out.data() + p * m * n;
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          double acc = 0;
          for (int64_t q = 0; q < k; ++q) acc += pa[r * k + q] * pb[q * n + c];
          pc[r * n + c] = round_result(node.dtype, acc);
        }
      }
    }
    return out;
  }

  // The ids themselves, each in [0, size) or equal to the ignored id.
  Values check_index(uint32_t i) {
    const Node& node = graph_.node(i);
    const Values& ids = values_[graph_.operand(i, 0)];
    const int64_t size = node.attrs[0], ignore = node.attrs[1];
    for (size_t j = 0; j < ids.size(); ++j) {
      const auto id = static_cast<int64_t>(ids[j]);
      if (id != ignore && (id < 0 || id >= size)) {
        throw IndexError("cross_entropy: target " + std::to_string(id) + " at position " +
                         std::to_string(j) + " is out of range for " + std::to_string(size) +
                         " classes");
      }
    }
    return ids;
  }

  // ArgSort and CumSum, row by row along the last dim: an insertion sort, stable by position
  // (NaN above every number), and plain running sums (from the end with attribute 1).
  Values along_rows(uint32_t i) {
    const Node& node = graph_.node(i);
    const Values& x = values_[graph_.operand(i, 0)];
    const int64_t n = node.shape.rank() == 0 ? 1 : node.shape[node.shape.rank() - 1];
    Values out(x.size());
    for (int64_t start = 0; start + n <= static_cast<int64_t>(x.size()) && n > 0; start += n) {
      if (node.op == OpKind::CumSum) {
        const bool reverse = node.attrs[0] != 0;
        double acc = 0;
        for (int64_t k = 0; k < n; ++k) {
          const int64_t j = start + (reverse ? n - 1 - k : k);
          out[j] = round_result(node.dtype, acc += x[j]);
        }
        continue;
      }
      const bool descending = node.attrs[0] != 0;
      // a comes strictly before b.
      const auto before = [&](double a, double b) {
        if (std::isnan(a) || std::isnan(b)) return descending ? !std::isnan(b) : !std::isnan(a);
        return descending ? a > b : a < b;
      };
      std::vector<int64_t> order;
      for (int64_t j = 0; j < n; ++j) {
        auto at = order.end();
        while (at != order.begin() && before(x[start + j], x[start + *(at - 1)])) --at;
        order.insert(at, j);
      }
      for (int64_t j = 0; j < n; ++j) out[start + j] = static_cast<double>(order[j]);
    }
    return out;
  }

  // IndexSelect: out[.., j, ..] = table[.., ids[j], ..]; IndexAdd: out[.., ids[j], ..] +=
  // source[.., j, ..] over zeros. Ids out of range are an error, as in PyTorch.
  Values index_op(uint32_t i) {
    const Node& node = graph_.node(i);
    const bool select = node.op == OpKind::IndexSelect;
    const uint32_t idata = graph_.operand(i, 0), iids = graph_.operand(i, 1);
    const Shape& data_shape = graph_.node(idata).shape;
    const Values &data = values_[idata], &ids = values_[iids];
    const int dim = static_cast<int>(node.attrs[0]);
    const Shape& table = select ? data_shape : node.shape;  // the side indexed by the ids
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= table[d];
    for (int d = dim + 1; d < table.rank(); ++d) inner *= table[d];
    const int64_t rows = table[dim], count = static_cast<int64_t>(ids.size());
    Values out(node.shape.numel(), 0.0);
    for (int64_t j = 0; j < count; ++j) {
      const auto id = static_cast<int64_t>(ids[j]);
      if (id < 0 || id >= rows) {
        throw IndexError(std::string(select ? "index_select" : "index_add") + ": index " +
                         std::to_string(id) + " is out of range for dim " + std::to_string(dim) +
                         " of size " + std::to_string(rows));
      }
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t e = 0; e < inner; ++e) {
          const int64_t at_table = (o * rows + id) * inner + e;
          const int64_t at_list = (o * count + j) * inner + e;
          if (select) {
            out[at_list] = data[at_table];
          } else {
            out[at_table] += data[at_list];
          }
        }
      }
    }
    if (!select) {
      for (double& v : out) v = round_result(node.dtype, v);
    }
    return out;
  }

  Values cat(uint32_t i) {
    const Node& node = graph_.node(i);
    const int dim = static_cast<int>(node.attrs[0]);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < dim; ++d) outer *= node.shape[d];
    for (int d = dim + 1; d < node.shape.rank(); ++d) inner *= node.shape[d];
    Values out(node.shape.numel());
    int64_t at = 0;  // the first row of the current operand along dim
    for (int k = 0; k < graph_.num_operands(i); ++k) {
      const uint32_t operand = graph_.operand(i, k);
      const int64_t rows = graph_.node(operand).shape[dim];
      const Values& part = values_[operand];
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t e = 0; e < rows * inner; ++e) {
          out[(o * node.shape[dim] + at) * inner + e] = part[o * rows * inner + e];
        }
      }
      at += rows;
    }
    return out;
  }

  const Graph& graph_;
  const std::vector<Values>& input_values_;
  std::vector<Values> values_;      // per node; empty before it is computed and after its last use
  std::vector<uint32_t> input_of_;  // per node: its position in graph.inputs, or kNone
  std::vector<uint32_t> last_use_;  // per node: the last node that reads it, kNone for outputs
};

}  // namespace

std::vector<std::vector<double>> evaluate_graph(
    const Graph& graph, const std::vector<std::vector<double>>& input_values) {
  return Evaluator(graph, input_values).run();
}

}  // namespace lt::ir
