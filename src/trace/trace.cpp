#include "trace/trace.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "autograd/function.h"
#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "runtime/config.h"
#include "runtime/data_cache.h"
#include "runtime/device.h"
#include "runtime/device_data.h"
#include "runtime/graph_executor.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/tensor_state.h"

namespace lt::trace {

void check_dtype(const char* op, DType dtype) {
  if (!dtype_has_kernels(dtype)) {
    throw Error(std::string(op) + ": dtype " + dtype_name(dtype) +
                " is not supported yet (supported: " + dtype_list(&DTypeInfo::has_kernels) + ")");
  }
}

void check_arithmetic(const char* op, DType dtype) {
  if (dtype_has_arithmetic(dtype)) return;
  throw Error(std::string(op) + ": dtype " + dtype_name(dtype) +
              " has no arithmetic yet (ops that compute take " +
              dtype_list(&DTypeInfo::arithmetic) + "; a " + dtype_name(dtype) +
              " tensor can be created, read, copied, filled and cast with to())");
}

void check_floating(const char* op, DType dtype) {
  if (dtype_is_floating(dtype)) return;
  throw Error(std::string(op) + ": expected a floating-point tensor, got " + dtype_name(dtype) +
              " (as in PyTorch; cast it with to() first)");
}

DType kernel_dtype(const char* op, ir::OpKind kind, DType dtype) {
  if (ir::has_kernel(kind, dtype)) return dtype;
  const uint8_t kinds = ir::element_kinds(kind);
  const uint8_t have = ir::element_kind(dtype);
  if (have == ir::kBoolElements && (kinds & ir::kIntegerElements)) return DType::i64;
  if ((have & (ir::kIntegerElements | ir::kBoolElements)) && (kinds & ir::kFloatingElements)) {
    return DType::f32;
  }
  check_arithmetic(op, dtype);
  throw Error(std::string(op) + ": not defined on " + dtype_name(dtype) +
              " tensors (it takes integer and bool tensors)");
}

bool holds_number(DType dtype, double value) {
  switch (dtype) {
    case DType::boolean:
      return value == 0 || value == 1;
    case DType::i32:
      return value == std::trunc(value) && value >= -0x1p31 && value < 0x1p31;
    case DType::u8:
      return value == std::trunc(value) && value >= 0 && value < 256;
    default:  // i64
      return value == std::trunc(value) && value >= -0x1p63 && value < 0x1p63;
  }
}

void check_shape(const char* op, const Shape& shape) {
  for (int64_t dim : shape) {
    if (dim < 0) throw Error(std::string(op) + ": negative size in shape " + shape.str());
  }
  // Sizes whose element count overflows are absurd on any device.
  int64_t n = 1;
  for (int64_t dim : shape) {
    if (dim != 0 && n > (int64_t{1} << 62) / dim) {
      throw Error(std::string(op) + ": shape " + shape.str() + " has too many elements");
    }
    n *= dim;
  }
}

int normalize_dim(const char* op, int dim, int rank) {
  const int bound = std::max(rank, 1);
  if (dim < -bound || dim >= bound) {
    throw Error(std::string(op) + ": dim " + std::to_string(dim) +
                " is out of range for a tensor of rank " + std::to_string(rank) + " (expected [" +
                std::to_string(-bound) + ", " + std::to_string(bound - 1) + "])");
  }
  return dim < 0 ? dim + bound : dim;
}

uint32_t reduce_mask(const char* op, const Shape& shape, const std::vector<int>& dims) {
  uint32_t mask = 0;
  const int rank = shape.rank();
  // As torch.sum(x, dim=[]): no dims means all of them.
  if (dims.empty()) return rank == 0 ? 0 : static_cast<uint32_t>((uint64_t{1} << rank) - 1);
  for (int dim : dims) {
    const int d = dim < 0 ? dim + rank : dim;
    if (d < 0 || d >= std::max(rank, 1) || (rank == 0 && d != 0)) {
      throw Error(std::string(op) + ": dim " + std::to_string(dim) +
                  " is out of range for a tensor of shape " + shape.str() + " (rank " +
                  std::to_string(rank) + ")");
    }
    if (mask >> d & 1) {
      throw Error(std::string(op) + ": dim " + std::to_string(dim) + " appears more than once");
    }
    mask |= uint32_t{1} << d;
  }
  return rank == 0 ? 0 : mask;
}

bool check_host_ids(const char* op, const char* what, const ir::NodePtr& ids, int64_t size,
                    std::optional<int64_t> ignore) {
  // Through views that keep every element once (reshape, permute, squeeze): the same values.
  const ir::Node* node = ids.get();
  while (ir::is_view(node->op) && node->operands[0]->shape.numel() == node->shape.numel() &&
         node->view_offset() == 0) {
    bool repeats = false;
    for (int d = 0; d < node->shape.rank(); ++d) {
      repeats = repeats || (node->view_stride(d) == 0 && node->shape[d] > 1);
    }
    if (repeats) break;
    node = node->operands[0].get();
  }
  if (node->op != ir::OpKind::DeviceData || !node->data->host_range) return false;
  const runtime::DeviceData::HostRange& range = *node->data->host_range;
  auto refuse = [&](int64_t value, int64_t at) {
    std::string position;
    for (int d = node->shape.rank() - 1; d >= 0; --d) {
      position = std::to_string(at % node->shape[d]) + (position.empty() ? "" : ", ") + position;
      at /= node->shape[d];
    }
    throw IndexError(std::string(op) + ": " + what + " " + std::to_string(value) +
                     " at position [" + position + "] is out of range for " + std::to_string(size) +
                     (ignore ? " classes" : " rows") + " (valid: 0 to " + std::to_string(size - 1) +
                     (ignore ? ", or the ignore_index " + std::to_string(*ignore) : "") + ")");
  };
  if (range.max >= size && range.max != ignore) refuse(range.max, range.max_at);
  if (range.min < 0 && range.min != ignore) refuse(range.min, range.min_at);
  if (range.max_negative && *range.max_negative != ignore) {
    refuse(*range.max_negative, range.max_negative_at);
  }
  // An ignored id past the end may hide others there.
  return !(ignore && *ignore >= size && range.max == *ignore);
}

void compute_now(const std::vector<Tensor>& tensors, const char* op) {
  std::vector<std::shared_ptr<TensorImpl>> impls;
  impls.reserve(tensors.size());
  for (const Tensor& t : tensors) impls.push_back(t.impl());
  runtime::sync_tensors(impls, op);
}

void check_fits(const char* op, const Shape& shape, DType dtype, const Device& where) {
  const int64_t capacity = runtime::memory_capacity(where);
  const double bytes = static_cast<double>(shape.numel()) * static_cast<double>(dtype_size(dtype));
  if (bytes > static_cast<double>(capacity)) {
    throw Error(std::string(op) + ": a result of shape " + shape.str() + " and dtype " +
                dtype_name(dtype) + " needs " + std::to_string(static_cast<int64_t>(bytes)) +
                " bytes, more than " + where.str() + " has (" + std::to_string(capacity) +
                " bytes in all, " + std::to_string(runtime::memory_available(where)) + " free)");
  }
}

ir::NodePtr value_of(const Tensor& t, const char* op) {
  if (!t.defined()) throw Error(std::string(op) + ": the tensor is undefined");
  check_dtype(op, t.dtype());
  autograd::note_operand(t);
  return t.impl()->value();
}

ir::NodePtr scalar(double value, DType dtype, const Device& device) {
  const runtime::Config& config = runtime::config();
  const ScalarPolicy policy = config.scalar_policy;
  const bool special = value == 0 || value == 1 || value == -1;
  switch (policy) {
    case ScalarPolicy::argument:
      return ir::make_scalar_node(ir::OpKind::Scalar, dtype, value);
    case ScalarPolicy::constant:
      return ir::make_scalar_node(ir::OpKind::Constant, dtype, value);
    case ScalarPolicy::cached:
    case ScalarPolicy::uncached:
      if (special && config.special_scalars) {
        return ir::make_scalar_node(ir::OpKind::Constant, dtype, value);
      }
      // Uploaded as the argument and constant policies' kernels would see it.
      value = ir::scalar_value(dtype, value);
      return runtime::leaf_node(policy == ScalarPolicy::cached
                                    ? runtime::cached_scalar_data(value, dtype, device)
                                    : runtime::upload_scalar(value, dtype, device));
  }
  return nullptr;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  if (a == b) return a;
  const int rank = std::max(a.rank(), b.rank());
  Shape out = a.rank() >= b.rank() ? a : b;
  for (int i = 0; i < rank; ++i) {
    const int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw Error(std::string(op) + ": shapes " + a.str() + " and " + b.str() +
                  " cannot be broadcast together (dim " + std::to_string(i) + ": " +
                  std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

ir::NodePtr cast(const ir::NodePtr& value, DType dtype) {
  if (value->dtype == dtype) return value;
  if (value->op == ir::OpKind::Scalar || value->op == ir::OpKind::Constant) {
    return ir::make_scalar_node(value->op, dtype, value->value);
  }
  return ir::make_node(ir::OpKind::Cast, dtype, value->shape, {value});
}

namespace {

// PyTorch's type categories: a rank-0 operand of a higher category than every operand with
// dimensions still decides the result (an integer tensor times a float rank-0 is float).
int category(DType dtype) {
  if (dtype == DType::boolean) return 0;
  return dtype_is_floating(dtype) ? 2 : 1;
}

}  // namespace

DType result_dtype(std::initializer_list<ir::NodePtr> operands) {
  // As in PyTorch, operands with dimensions decide the dtype; rank-0 ones only when all are,
  // or when they are of a higher category.
  bool any_dims = false, any_zero_dim = false;
  DType dims_dtype = DType::f32, zero_dim_dtype = DType::f32;
  for (const ir::NodePtr& operand : operands) {
    if (operand->shape.rank() > 0) {
      dims_dtype = any_dims ? promote_types(dims_dtype, operand->dtype) : operand->dtype;
      any_dims = true;
    } else {
      zero_dim_dtype =
          any_zero_dim ? promote_types(zero_dim_dtype, operand->dtype) : operand->dtype;
      any_zero_dim = true;
    }
  }
  if (any_dims && any_zero_dim && category(zero_dim_dtype) > category(dims_dtype)) {
    return zero_dim_dtype;
  }
  return any_dims ? dims_dtype : zero_dim_dtype;
}

Device common_device(const char* op, std::initializer_list<ir::NodePtr> operands) {
  const ir::Node* first = nullptr;
  for (const ir::NodePtr& operand : operands) {
    if (!operand->device) continue;
    if (!first) {
      first = operand.get();
    } else if (*operand->device != *first->device) {
      throw Error(std::string(op) + ": expected all tensors on one device, got " +
                  first->device->str() + " and " + operand->device->str());
    }
  }
  return first ? *first->device : default_device();
}

ir::NodePtr elementwise(const char* op, ir::OpKind kind,
                        std::initializer_list<ir::NodePtr> operands) {
  Shape shape = (*operands.begin())->shape;
  for (const ir::NodePtr& operand : operands) shape = broadcast_shapes(op, shape, operand->shape);
  const Device device = common_device(op, operands);
  // Identity only moves values (clone, fill_, copy_, expand): every storage dtype has it.
  DType dtype = result_dtype(operands);
  // PyTorch's add and mul of bool values are or and and.
  if (dtype == DType::boolean && kind == ir::OpKind::Add) kind = ir::OpKind::BitwiseOr;
  if (dtype == DType::boolean && kind == ir::OpKind::Mul) kind = ir::OpKind::BitwiseAnd;
  dtype = kernel_dtype(op, kind, dtype);
  check_fits(op, shape, dtype, device);
  switch (operands.size()) {
    case 1:
      return ir::make_node(kind, dtype, shape, {cast(operands.begin()[0], dtype)});
    case 2:
      return ir::make_node(kind, dtype, shape,
                           {cast(operands.begin()[0], dtype), cast(operands.begin()[1], dtype)});
    default:
      return ir::make_node(kind, dtype, shape,
                           {cast(operands.begin()[0], dtype), cast(operands.begin()[1], dtype),
                            cast(operands.begin()[2], dtype)});
  }
}

ir::NodePtr expand(const char* op, const ir::NodePtr& value, const Shape& shape,
                   const Device& device) {
  if (value->device && *value->device != device) {
    throw Error(std::string(op) + ": expected a value on " + device.str() + ", got one on " +
                value->device->str());
  }
  check_fits(op, shape, value->dtype, device);
  if (broadcast_shapes(op, shape, value->shape) != shape) {
    throw Error(std::string(op) + ": a value of shape " + value->shape.str() +
                " cannot be broadcast to shape " + shape.str());
  }
  ir::NodePtr node = ir::make_node(ir::OpKind::Identity, value->dtype, shape, {value});
  node->device = device;  // a number expanded to a tensor lives where it is asked to
  return node;
}

Tensor make_tensor(ir::NodePtr node) {
  // Every traced value with a shape has a device: its operands' (checked by the op), or that
  // of the fill that made it.
  auto impl = std::make_shared<TensorImpl>(node->shape, node->dtype, node->device.value());
  impl->set_ir(std::move(node));
  return Tensor(std::move(impl));
}

Tensor& assign(Tensor& self, const ir::NodePtr& result, const char* op) {
  autograd::check_in_place(self, op);
  // As PyTorch: an in-place op may not truncate its floating result into an integer tensor.
  if (dtype_is_floating(result->dtype) && !dtype_is_floating(self.dtype())) {
    throw Error(std::string(op) + ": the result is " + dtype_name(result->dtype) +
                " and cannot be written into a " + dtype_name(self.dtype()) + " tensor in place");
  }
  if (result->shape != self.shape()) {
    throw Error(std::string(op) + ": output with shape " + self.shape().str() +
                " doesn't match the broadcast shape " + result->shape.str());
  }
  self.impl()->set_ir(cast(result, self.dtype()));
  state_of(*self.impl()).writes.fetch_add(1, std::memory_order_relaxed);
  return self;
}

Tensor& overwrite(Tensor& self, const Tensor& value) {
  const runtime::TraceScope scope("copy_");
  ir::NodePtr old = value_of(self, "copy_");
  ir::NodePtr from = value_of(value, "copy_");
  common_device("copy_", {old, from});
  ir::NodePtr v = cast(from, old->dtype);
  if (v->shape != old->shape) v = expand("copy_", v, old->shape, *old->device);
  if (old->op == ir::OpKind::DeviceData && ir::is_elementwise(v->op) &&
      dtype_has_arithmetic(v->dtype)) {
    v = ir::make_node(ir::OpKind::Where, v->dtype, v->shape,
                      {ir::make_scalar_node(ir::OpKind::Constant, v->dtype, 1.0), v, old});
  }
  return assign(self, v, "copy_");
}

}  // namespace lt::trace
