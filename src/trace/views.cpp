// View ops: reshape, transpose, permute, squeeze, unsqueeze, expand, slice. Each records a
// strided window on its base's storage (one View node, composed with the view it is taken
// of), which kernels read in place: a transpose feeding an elementwise op is a strided read.
#include <algorithm>
#include <numeric>
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

namespace {

using autograd::Gradients;

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.rank());
  for (int64_t d = shape.rank() - 1, stride = 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

// A value as a window on a buffer: element (i0, i1, ...) at offset + sum(i_d * strides[d]).
struct Layout {
  ir::NodePtr base;
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

Layout layout_of(const ir::NodePtr& value) {
  if (value->op == ir::OpKind::View) {
    Layout layout{value->operands[0], value->shape, {}, value->view_offset()};
    for (int d = 0; d < value->shape.rank(); ++d) layout.strides.push_back(value->view_stride(d));
    return layout;
  }
  return {value, value->shape, contiguous_strides(value->shape), 0};
}

bool covers_base(const Layout& layout) {
  if (layout.offset != 0 || layout.shape != layout.base->shape) return false;
  const std::vector<int64_t> contiguous = contiguous_strides(layout.shape);
  for (int d = 0; d < layout.shape.rank(); ++d) {
    if (layout.shape[d] != 1 && layout.strides[d] != contiguous[d]) return false;
  }
  return true;
}

ir::NodePtr make_view(const Layout& layout) {
  if (covers_base(layout)) return layout.base;  // the whole base, in order: no view needed
  std::vector<int64_t> attrs{layout.offset};
  attrs.insert(attrs.end(), layout.strides.begin(), layout.strides.end());
  return ir::make_node(ir::OpKind::View, layout.base->dtype, layout.shape, {layout.base}, attrs);
}

Tensor view_tensor(const ir::NodePtr& node) {
  Tensor t = trace::make_tensor(node);
  trace::state_of(*t.impl()).is_view = true;
  return t;
}

using trace::normalize_dim;

// The sizes `requested` (one of them may be -1) for `numel` elements, as torch.reshape reads
// them.
Shape infer_shape(const char* op, const std::vector<int64_t>& requested, const Shape& from) {
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < requested.size(); ++d) {
    if (requested[d] == -1) {
      if (infer >= 0) throw Error(std::string(op) + ": only one dimension can be inferred (-1)");
      infer = static_cast<int>(d);
    } else if (requested[d] < 0) {
      throw Error(std::string(op) + ": invalid size " + std::to_string(requested[d]));
    } else {
      known *= requested[d];
    }
  }
  if (static_cast<int>(requested.size()) > Shape::kMaxRank) {
    throw Error(std::string(op) + ": at most " + std::to_string(Shape::kMaxRank) + " dims");
  }
  std::vector<int64_t> sizes = requested;
  const int64_t numel = from.numel();
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      throw Error(std::string(op) + ": shape " + Shape(std::vector<int64_t>(requested)).str() +
                  " is invalid for input of size " + std::to_string(numel) + " (shape " +
                  from.str() + ")");
    }
    sizes[infer] = numel / known;
  } else if (known != numel) {
    throw Error(std::string(op) + ": shape " + Shape(sizes).str() +
                " is invalid for input of size " + std::to_string(numel) + " (shape " + from.str() +
                ")");
  }
  return Shape(sizes);
}

// Strides that show `layout`'s elements, in order, with `shape`, without moving them; false
// when none exist (a reshape then copies). The algorithm of PyTorch's computeStride: groups of
// dims contiguous with each other may be split and merged.
bool reshape_strides(const Layout& layout, const Shape& shape, std::vector<int64_t>& strides) {
  strides.assign(shape.rank(), 0);
  if (layout.shape.numel() == 0 || layout.shape.rank() == 0) {
    strides = contiguous_strides(shape);
    return true;
  }
  int view_d = shape.rank() - 1;
  int64_t chunk_stride = layout.strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = layout.shape.rank() - 1; d >= 0; --d) {
    tensor_numel *= layout.shape[d];
    if (d == 0 ||
        (layout.shape[d - 1] != 1 && layout.strides[d - 1] != tensor_numel * chunk_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        strides[view_d] = view_numel * chunk_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_stride = layout.strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor reshape_impl(const Tensor& self, const std::vector<int64_t>& sizes, const char* op,
                    bool allow_copy) {
  ir::NodePtr v = trace::value_of(self, op);
  const Shape shape = infer_shape(op, sizes, v->shape);
  Layout layout = layout_of(v);
  std::vector<int64_t> strides;
  ir::NodePtr node;
  if (reshape_strides(layout, shape, strides)) {
    layout.shape = shape;
    layout.strides = strides;
    node = make_view(layout);
  } else if (allow_copy) {
    // The elements are not laid out in order: copy them (a strided read), then view the copy.
    ir::NodePtr copy = ir::make_node(ir::OpKind::Identity, v->dtype, v->shape, {v});
    node = make_view({copy, shape, contiguous_strides(shape), 0});
  } else {
    throw Error(std::string(op) + ": a tensor of shape " + v->shape.str() +
                " with these strides cannot be viewed as " + shape.str() +
                " without a copy; use reshape()");
  }
  Tensor out = view_tensor(node);
  if (!autograd::needs_grad({&self})) return out;
  return autograd::record(op, out, {&self}, [from = v->shape](const Tensor& g) {
    return Gradients{g.reshape(from.to_vector())};
  });
}

}  // namespace

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  const runtime::TraceScope scope("reshape");
  return reshape_impl(*this, shape, "reshape", true);
}

Tensor Tensor::view(const std::vector<int64_t>& shape) const {
  const runtime::TraceScope scope("view");
  return reshape_impl(*this, shape, "view", false);
}

Tensor Tensor::flatten(int start_dim, int end_dim) const {
  const runtime::TraceScope scope("flatten");
  const Shape s = trace::value_of(*this, "flatten")->shape;
  if (s.rank() == 0) return reshape({1});
  const int start = normalize_dim("flatten", start_dim, s.rank());
  const int end = normalize_dim("flatten", end_dim, s.rank());
  if (start > end) throw Error("flatten: start_dim cannot come after end_dim");
  std::vector<int64_t> sizes(s.begin(), s.begin() + start);
  int64_t merged = 1;
  for (int d = start; d <= end; ++d) merged *= s[d];
  sizes.push_back(merged);
  sizes.insert(sizes.end(), s.begin() + end + 1, s.end());
  return reshape(sizes);
}

Tensor Tensor::permute(const std::vector<int>& dims) const {
  const runtime::TraceScope scope("permute");
  ir::NodePtr v = trace::value_of(*this, "permute");
  const int rank = v->shape.rank();
  if (static_cast<int>(dims.size()) != rank) {
    throw Error("permute: " + std::to_string(dims.size()) + " dims given for a tensor of rank " +
                std::to_string(rank) + " (shape " + v->shape.str() + ")");
  }
  std::vector<int> order(rank);
  std::vector<char> seen(rank, 0);
  for (int d = 0; d < rank; ++d) {
    order[d] = normalize_dim("permute", dims[d], rank);
    if (seen[order[d]]++) throw Error("permute: dim " + std::to_string(dims[d]) + " repeats");
  }
  const Layout from = layout_of(v);
  Layout to{from.base, v->shape, from.strides, from.offset};
  for (int d = 0; d < rank; ++d) {
    to.shape[d] = from.shape[order[d]];
    to.strides[d] = from.strides[order[d]];
  }
  Tensor out = view_tensor(make_view(to));
  if (!autograd::needs_grad({this})) return out;
  std::vector<int> inverse(rank);
  for (int d = 0; d < rank; ++d) inverse[order[d]] = d;
  return autograd::record("permute", out, {this},
                          [inverse](const Tensor& g) { return Gradients{g.permute(inverse)}; });
}

Tensor Tensor::transpose(int dim0, int dim1) const {
  const runtime::TraceScope scope("transpose");
  const int rank = trace::value_of(*this, "transpose")->shape.rank();
  if (rank == 0) return reshape({});  // a view, as every transpose
  std::vector<int> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim("transpose", dim0, rank)],
            order[normalize_dim("transpose", dim1, rank)]);
  return permute(order);
}

Tensor Tensor::t() const {
  const runtime::TraceScope scope("t");
  const int rank = trace::value_of(*this, "t")->shape.rank();
  if (rank > 2) {
    throw Error("t: expects a tensor of at most 2 dims, got " + std::to_string(rank) +
                " (use transpose)");
  }
  return rank < 2 ? reshape(shape().to_vector()) : transpose(0, 1);
}

Tensor Tensor::unsqueeze(int dim) const {
  const runtime::TraceScope scope("unsqueeze");
  const Shape s = trace::value_of(*this, "unsqueeze")->shape;
  const int d = normalize_dim("unsqueeze", dim, s.rank() + 1);
  std::vector<int64_t> sizes = s.to_vector();
  sizes.insert(sizes.begin() + d, 1);
  return reshape(sizes);
}

Tensor Tensor::squeeze() const {
  const runtime::TraceScope scope("squeeze");
  std::vector<int64_t> sizes;
  const Shape shape = trace::value_of(*this, "squeeze")->shape;
  for (int64_t size : shape) {
    if (size != 1) sizes.push_back(size);
  }
  return reshape(sizes);
}

Tensor Tensor::squeeze(int dim) const {
  const runtime::TraceScope scope("squeeze");
  const Shape s = trace::value_of(*this, "squeeze")->shape;
  if (s.rank() == 0) return reshape({});
  const int d = normalize_dim("squeeze", dim, s.rank());
  if (s[d] != 1) return reshape(s.to_vector());
  std::vector<int64_t> sizes = s.to_vector();
  sizes.erase(sizes.begin() + d);
  return reshape(sizes);
}

Tensor Tensor::expand(const std::vector<int64_t>& sizes) const {
  const runtime::TraceScope scope("expand");
  ir::NodePtr v = trace::value_of(*this, "expand");
  const int rank = static_cast<int>(sizes.size());
  const int lead = rank - v->shape.rank();
  if (lead < 0 || rank > Shape::kMaxRank) {
    throw Error("expand: the size " + Shape(std::vector<int64_t>(sizes)).str() +
                " has fewer dims than the tensor's shape " + v->shape.str());
  }
  const Layout from = layout_of(v);
  Layout to{from.base, Shape(std::vector<int64_t>(rank, 1)), std::vector<int64_t>(rank, 0),
            from.offset};
  for (int d = 0; d < rank; ++d) {
    const int e = d - lead;
    const int64_t have = e >= 0 ? v->shape[e] : 1;
    const int64_t want = sizes[d] == -1 && e >= 0 ? have : sizes[d];
    if (want < 0 || (have != want && have != 1)) {
      throw Error("expand: the tensor of shape " + v->shape.str() + " cannot be expanded to " +
                  Shape(std::vector<int64_t>(sizes)).str() + " (dim " + std::to_string(d) + ": " +
                  std::to_string(have) + " vs " + std::to_string(sizes[d]) + ")");
    }
    to.shape[d] = want;
    to.strides[d] = (e >= 0 && have == want) ? from.strides[e] : 0;
  }
  trace::check_fits("expand", to.shape, v->dtype, *v->device);
  Tensor out = view_tensor(make_view(to));
  if (!autograd::needs_grad({this})) return out;
  return autograd::record("expand", out, {this}, [from_shape = v->shape](const Tensor& g) {
    return Gradients{autograd::sum_to(g, from_shape)};
  });
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end, int64_t step) const {
  const runtime::TraceScope scope("slice");
  ir::NodePtr v = trace::value_of(*this, "slice");
  if (v->shape.rank() == 0) throw Error("slice: cannot slice a rank-0 tensor");
  const int d = normalize_dim("slice", dim, v->shape.rank());
  if (step <= 0) throw Error("slice: step must be positive, got " + std::to_string(step));
  const int64_t size = v->shape[d];
  // As Python slices: negative bounds count from the end, and bounds are clamped.
  auto clamp_bound = [size](int64_t b) {
    if (b < 0) b += size;
    return std::clamp<int64_t>(b, 0, size);
  };
  start = clamp_bound(start);
  end = std::max(start, clamp_bound(end));
  const int64_t length = (end - start + step - 1) / step;
  Layout layout = layout_of(v);
  layout.offset += start * layout.strides[d];
  layout.strides[d] *= step;
  layout.shape[d] = length;
  Tensor out = view_tensor(make_view(layout));
  if (!autograd::needs_grad({this})) return out;
  return autograd::record("slice", out, {this}, [d, start, step, length, size](const Tensor& g) {
    // Scatter the slice's gradient back into zeros of the whole dim.
    const DeviceGuard on(g.device());
    Tensor positions =
        arange(static_cast<double>(start), static_cast<double>(start + length * step),
               static_cast<double>(step), DType::i64);
    return Gradients{trace::index_add_zeros(g, d, positions, size)};
  });
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  const runtime::TraceScope scope("narrow");
  const Shape s = trace::value_of(*this, "narrow")->shape;
  if (s.rank() == 0) throw Error("narrow: cannot narrow a rank-0 tensor");
  const int d = normalize_dim("narrow", dim, s.rank());
  if (start < 0) start += s[d];
  if (start < 0 || length < 0 || start + length > s[d]) {
    throw Error("narrow: start " + std::to_string(start) + " and length " + std::to_string(length) +
                " are out of range for dim " + std::to_string(d) + " of size " +
                std::to_string(s[d]));
  }
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int dim, int64_t index) const {
  const runtime::TraceScope scope("select");
  const Shape s = trace::value_of(*this, "select")->shape;
  if (s.rank() == 0) throw Error("select: cannot select from a rank-0 tensor");
  const int d = normalize_dim("select", dim, s.rank());
  if (index < -s[d] || index >= s[d]) {
    throw Error("select: index " + std::to_string(index) + " is out of range for dim " +
                std::to_string(d) + " of size " + std::to_string(s[d]));
  }
  if (index < 0) index += s[d];
  return slice(d, index, index + 1, 1).squeeze(d);
}

Tensor Tensor::contiguous() const {
  const runtime::TraceScope scope("contiguous");
  ir::NodePtr v = trace::value_of(*this, "contiguous");
  if (v->op != ir::OpKind::View) return *this;
  Tensor out = trace::make_tensor(ir::make_node(ir::OpKind::Identity, v->dtype, v->shape, {v}));
  if (!autograd::needs_grad({this})) return out;
  return autograd::record("contiguous", out, {this}, [](const Tensor& g) { return Gradients{g}; });
}

namespace {

// The positions (i64, flattened) of the window's elements in `numel` elements in row-major
// order: the ids that scatter into, and gather from, the window.
Tensor window_positions(int64_t numel, const std::vector<int64_t>& sizes,
                        const std::vector<int64_t>& strides, int64_t offset) {
  const NoGradGuard no_grad;
  return as_strided(arange(static_cast<double>(numel), DType::i64), sizes, strides, offset)
      .reshape({-1});
}

void check_window(const char* op, const Shape& of, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset) {
  if (sizes.size() != strides.size() || sizes.size() > static_cast<size_t>(Shape::kMaxRank)) {
    throw Error(std::string(op) + ": " + std::to_string(sizes.size()) + " sizes and " +
                std::to_string(strides.size()) + " strides (they must match, at most " +
                std::to_string(Shape::kMaxRank) + ")");
  }
  if (offset < 0) throw Error(std::string(op) + ": negative offset " + std::to_string(offset));
  int64_t last = offset;
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) {
      throw Error(std::string(op) + ": negative size or stride in dim " + std::to_string(d));
    }
    empty = empty || sizes[d] == 0;
    if (sizes[d] > 0) last += (sizes[d] - 1) * strides[d];
  }
  if (!empty && last >= of.numel()) {
    throw Error(std::string(op) + ": the window reaches element " + std::to_string(last) +
                " of a tensor of shape " + of.str() + " (" + std::to_string(of.numel()) +
                " elements)");
  }
}

}  // namespace

Tensor as_strided(const Tensor& self, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset) {
  const runtime::TraceScope scope("as_strided");
  ir::NodePtr v = trace::value_of(self, "as_strided");
  check_window("as_strided", v->shape, sizes, strides, offset);
  // The window counts in self's elements in row-major order: on a view whose elements are not
  // in that order in its base, the view is copied out first.
  Layout from = layout_of(v);
  if (from.strides != contiguous_strides(from.shape)) {
    v = trace::value_of(self.contiguous(), "as_strided");
    from = layout_of(v);
  }
  const Layout to{from.base, Shape(std::vector<int64_t>(sizes)), strides, from.offset + offset};
  trace::check_fits("as_strided", to.shape, v->dtype, *v->device);
  Tensor out = view_tensor(make_view(to));
  if (!autograd::needs_grad({&self})) return out;
  return autograd::record(
      "as_strided", out, {&self}, [shape = v->shape, sizes, strides, offset](const Tensor& g) {
        const DeviceGuard on(g.device());
        Tensor ids = window_positions(shape.numel(), sizes, strides, offset);
        return Gradients{trace::index_add_zeros(g.reshape({-1}), 0, ids, shape.numel())
                             .reshape(shape.to_vector())};
      });
}

Tensor as_strided_scatter(const Tensor& self, const Tensor& src, const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& strides, int64_t offset) {
  const runtime::TraceScope scope("as_strided_scatter");
  ir::NodePtr v = trace::value_of(self, "as_strided_scatter");
  ir::NodePtr s = trace::value_of(src, "as_strided_scatter");
  check_window("as_strided_scatter", v->shape, sizes, strides, offset);
  const Shape window = Shape(sizes);
  if (trace::broadcast_shapes("as_strided_scatter", s->shape, window) != window) {
    throw Error("as_strided_scatter: a source of shape " + s->shape.str() +
                " does not broadcast to the window's shape " + window.str());
  }
  const int64_t numel = v->shape.numel();
  const DeviceGuard on(self.device());
  Tensor ids = window_positions(numel, sizes, strides, offset);
  // Scattered into zeros by adding, which is exact (0 + x is x); integer and bool values travel
  // as f64, exact to 2^53. The mask says which elements the window covers.
  const DType carrier = dtype_is_floating(v->dtype) ? v->dtype : DType::f64;
  Tensor out, covered;
  {
    const NoGradGuard no_grad;
    Tensor values = src.to(carrier).expand(sizes).reshape({-1});
    Tensor placed = trace::index_add_zeros(values, 0, ids, numel);
    covered = trace::index_add_zeros(ones({window.numel()}), 0, ids, numel).ne(0.0);
    out = where(covered, placed, self.to(carrier).reshape({-1}))
              .to(v->dtype)
              .reshape(v->shape.to_vector());
  }
  if (!autograd::needs_grad({&self, &src})) return out;
  return autograd::record(
      "as_strided_scatter", out, {&self, &src},
      [covered, shape = v->shape, src_shape = s->shape, sizes, strides, offset](const Tensor& g) {
        Tensor g_self =
            where(covered, zeros({}, g.dtype()), g.reshape({-1})).reshape(shape.to_vector());
        Tensor g_src =
            autograd::sum_to(as_strided(g.contiguous(), sizes, strides, offset), src_shape);
        return Gradients{g_self, g_src};
      });
}

}  // namespace lt
