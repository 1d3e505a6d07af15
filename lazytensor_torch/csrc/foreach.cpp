// The _foreach_* family on the device: one dispatcher call for a whole list of tensors, which
// calls the device's own kernel for each tensor directly (a redispatch to PrivateUse1, past
// autograd and the view bookkeeping that the list op itself has done once), where PyTorch's
// generic implementation makes one full dispatcher call per tensor. The engine fuses the
// per-tensor ops it traces into its multi-tensor kernels either way; what the list op saves is
// host time. Python numbers (alpha, a ScalarList's values, a CPU tensor of them) are numbers,
// so kernel arguments.
//
// An in-place list op that fails part-way (an error on the fifth tensor) puts every storage of
// the list back as it was: the list is left unchanged, not half updated.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/clamp_max_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/erf_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/linalg_vector_norm_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/minimum_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/sign_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <torch/library.h>

#include "storage.h"

namespace lazytensor_torch {
namespace {

const c10::DispatchKeySet kDevice(c10::DispatchKey::PrivateUse1);

void same_length(const char* op, size_t n, size_t m) {
  TORCH_CHECK(n == m, op, ": the lists hold ", n, " and ", m,
              " tensors; they must be of one length");
}

// One result per tensor of a list: results(n, f) = [f(0), ..., f(n - 1)].
template <class F>
std::vector<at::Tensor> results(size_t n, F&& f) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(f(i));
  return out;
}

// A list element as the in-place per-tensor ops take it (handles: the tensor is not copied).
at::Tensor& mut(const at::Tensor& t) {
  return const_cast<at::Tensor&>(t);
}

// The in-place form: f(i) updates self[i] in place; if one fails, every storage of the list
// gets its value back.
template <class F>
void in_place(const char* op, at::TensorList self, F&& f) {
  const StorageSnapshot before(self);
  size_t i = 0;
  try {
    for (; i < self.size(); ++i) f(i);
  } catch (const c10::Error& e) {
    before.restore();
    TORCH_CHECK(false, op, ": tensor ", i, " of the list: ", e.what_without_backtrace());
  } catch (...) {
    before.restore();
    throw;
  }
}

// The in-place form of an op without an in-place per-tensor op (maximum, minimum): every new
// value first, then the writes (each new value must fit its tensor, as in place it must).
template <class F>
void assign(const char* op, at::TensorList self, F&& f) {
  const std::vector<at::Tensor> values = results(self.size(), f);
  for (size_t i = 0; i < self.size(); ++i) {
    TORCH_CHECK(c10::canCast(values[i].scalar_type(), self[i].scalar_type()), op, ": result type ",
                values[i].scalar_type(), " can't be cast to the desired output type ",
                self[i].scalar_type());
    TORCH_CHECK(values[i].sizes() == self[i].sizes(), op, ": output with shape ", self[i].sizes(),
                " doesn't match the broadcast shape ", values[i].sizes());
  }
  for (size_t i = 0; i < self.size(); ++i) write(self[i], read(values[i]));
}

// A CPU tensor of numbers, one per list element (addcmul's and addcdiv's `.Tensor` form).
std::vector<at::Scalar> numbers(const char* op, const at::Tensor& scalars, size_t n) {
  TORCH_CHECK(scalars.dim() == 1 && static_cast<size_t>(scalars.numel()) == n, op,
              ": expected one number per tensor (a 1-D tensor of ", n, "), got shape ",
              scalars.sizes());
  const at::Tensor values = scalars.to(at::kCPU, at::kDouble).contiguous();
  const double* data = values.data_ptr<double>();
  return std::vector<at::Scalar>(data, data + n);
}

// --- add, sub, mul, div: with a number, a list of numbers, a list of tensors, one tensor.

#define LT_FOREACH_ARITH_ALPHA(name)                                                        \
  std::vector<at::Tensor> name##_scalar(at::TensorList self, const at::Scalar& s) {         \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Scalar::redispatch(kDevice, self[i], s, 1);                   \
    });                                                                                     \
  }                                                                                         \
  void name##_scalar_(at::TensorList self, const at::Scalar& s) {                           \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Scalar::redispatch(kDevice, mut(self[i]), s, 1);             \
    });                                                                                     \
  }                                                                                         \
  std::vector<at::Tensor> name##_scalars(at::TensorList self, at::ArrayRef<at::Scalar> s) { \
    same_length("_foreach_" #name, self.size(), s.size());                                  \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Scalar::redispatch(kDevice, self[i], s[i], 1);                \
    });                                                                                     \
  }                                                                                         \
  void name##_scalars_(at::TensorList self, at::ArrayRef<at::Scalar> s) {                   \
    same_length("_foreach_" #name "_", self.size(), s.size());                              \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Scalar::redispatch(kDevice, mut(self[i]), s[i], 1);          \
    });                                                                                     \
  }                                                                                         \
  std::vector<at::Tensor> name##_list(at::TensorList self, at::TensorList other,            \
                                      const at::Scalar& alpha) {                            \
    same_length("_foreach_" #name, self.size(), other.size());                              \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Tensor::redispatch(kDevice, self[i], other[i], alpha);        \
    });                                                                                     \
  }                                                                                         \
  void name##_list_(at::TensorList self, at::TensorList other, const at::Scalar& alpha) {   \
    same_length("_foreach_" #name "_", self.size(), other.size());                          \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Tensor::redispatch(kDevice, mut(self[i]), other[i], alpha);  \
    });                                                                                     \
  }
LT_FOREACH_ARITH_ALPHA(add)
LT_FOREACH_ARITH_ALPHA(sub)
#undef LT_FOREACH_ARITH_ALPHA

std::vector<at::Tensor> add_tensor(at::TensorList self, const at::Tensor& other,
                                   const at::Scalar& alpha) {
  return results(self.size(), [&](size_t i) {
    return at::_ops::add_Tensor::redispatch(kDevice, self[i], other, alpha);
  });
}

void add_tensor_(at::TensorList self, const at::Tensor& other, const at::Scalar& alpha) {
  in_place("_foreach_add_", self, [&](size_t i) {
    return at::_ops::add__Tensor::redispatch(kDevice, mut(self[i]), other, alpha);
  });
}

#define LT_FOREACH_ARITH(name)                                                              \
  std::vector<at::Tensor> name##_scalar(at::TensorList self, const at::Scalar& s) {         \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Scalar::redispatch(kDevice, self[i], s);                      \
    });                                                                                     \
  }                                                                                         \
  void name##_scalar_(at::TensorList self, const at::Scalar& s) {                           \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Scalar::redispatch(kDevice, mut(self[i]), s);                \
    });                                                                                     \
  }                                                                                         \
  std::vector<at::Tensor> name##_scalars(at::TensorList self, at::ArrayRef<at::Scalar> s) { \
    same_length("_foreach_" #name, self.size(), s.size());                                  \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Scalar::redispatch(kDevice, self[i], s[i]);                   \
    });                                                                                     \
  }                                                                                         \
  void name##_scalars_(at::TensorList self, at::ArrayRef<at::Scalar> s) {                   \
    same_length("_foreach_" #name "_", self.size(), s.size());                              \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Scalar::redispatch(kDevice, mut(self[i]), s[i]);             \
    });                                                                                     \
  }                                                                                         \
  std::vector<at::Tensor> name##_list(at::TensorList self, at::TensorList other) {          \
    same_length("_foreach_" #name, self.size(), other.size());                              \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Tensor::redispatch(kDevice, self[i], other[i]);               \
    });                                                                                     \
  }                                                                                         \
  void name##_list_(at::TensorList self, at::TensorList other) {                            \
    same_length("_foreach_" #name "_", self.size(), other.size());                          \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Tensor::redispatch(kDevice, mut(self[i]), other[i]);         \
    });                                                                                     \
  }                                                                                         \
  std::vector<at::Tensor> name##_tensor(at::TensorList self, const at::Tensor& other) {     \
    return results(self.size(), [&](size_t i) {                                             \
      return at::_ops::name##_Tensor::redispatch(kDevice, self[i], other);                  \
    });                                                                                     \
  }                                                                                         \
  void name##_tensor_(at::TensorList self, const at::Tensor& other) {                       \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                   \
      return at::_ops::name##__Tensor::redispatch(kDevice, mut(self[i]), other);            \
    });                                                                                     \
  }
LT_FOREACH_ARITH(mul)
LT_FOREACH_ARITH(div)
#undef LT_FOREACH_ARITH

// --- maximum, minimum, clamp_min, clamp_max: a number (the clamp), a list of numbers, a list
// of tensors (the elementwise maximum or minimum).

#define LT_FOREACH_BOUND(name, clamp, pair)                                                        \
  std::vector<at::Tensor> name##_scalar(at::TensorList self, const at::Scalar& s) {                \
    return results(self.size(),                                                                    \
                   [&](size_t i) { return at::_ops::clamp::redispatch(kDevice, self[i], s); });    \
  }                                                                                                \
  void name##_scalar_(at::TensorList self, const at::Scalar& s) {                                  \
    assign("_foreach_" #name "_", self,                                                            \
           [&](size_t i) { return at::_ops::clamp::redispatch(kDevice, self[i], s); });            \
  }                                                                                                \
  std::vector<at::Tensor> name##_scalars(at::TensorList self, at::ArrayRef<at::Scalar> s) {        \
    same_length("_foreach_" #name, self.size(), s.size());                                         \
    return results(self.size(),                                                                    \
                   [&](size_t i) { return at::_ops::clamp::redispatch(kDevice, self[i], s[i]); }); \
  }                                                                                                \
  void name##_scalars_(at::TensorList self, at::ArrayRef<at::Scalar> s) {                          \
    same_length("_foreach_" #name "_", self.size(), s.size());                                     \
    assign("_foreach_" #name "_", self,                                                            \
           [&](size_t i) { return at::_ops::clamp::redispatch(kDevice, self[i], s[i]); });         \
  }                                                                                                \
  std::vector<at::Tensor> name##_list(at::TensorList self, at::TensorList other) {                 \
    same_length("_foreach_" #name, self.size(), other.size());                                     \
    return results(self.size(), [&](size_t i) {                                                    \
      return at::_ops::pair::redispatch(kDevice, self[i], other[i]);                               \
    });                                                                                            \
  }                                                                                                \
  void name##_list_(at::TensorList self, at::TensorList other) {                                   \
    same_length("_foreach_" #name "_", self.size(), other.size());                                 \
    assign("_foreach_" #name "_", self,                                                            \
           [&](size_t i) { return at::_ops::pair::redispatch(kDevice, self[i], other[i]); });      \
  }
LT_FOREACH_BOUND(maximum, clamp_min, maximum)
LT_FOREACH_BOUND(minimum, clamp_max, minimum)
LT_FOREACH_BOUND(clamp_min, clamp_min, maximum)
LT_FOREACH_BOUND(clamp_max, clamp_max, minimum)
#undef LT_FOREACH_BOUND

// --- addcmul, addcdiv: self + value * t1 op t2, value a number, one number per tensor, or a
// CPU tensor of them.

#define LT_FOREACH_POINTWISE(name)                                                                 \
  std::vector<at::Tensor> name##_scalar(at::TensorList self, at::TensorList t1, at::TensorList t2, \
                                        const at::Scalar& value) {                                 \
    same_length("_foreach_" #name, self.size(), t1.size());                                        \
    same_length("_foreach_" #name, self.size(), t2.size());                                        \
    return results(self.size(), [&](size_t i) {                                                    \
      return at::_ops::name::redispatch(kDevice, self[i], t1[i], t2[i], value);                    \
    });                                                                                            \
  }                                                                                                \
  void name##_scalar_(at::TensorList self, at::TensorList t1, at::TensorList t2,                   \
                      const at::Scalar& value) {                                                   \
    same_length("_foreach_" #name "_", self.size(), t1.size());                                    \
    same_length("_foreach_" #name "_", self.size(), t2.size());                                    \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                          \
      return at::_ops::name##_::redispatch(kDevice, mut(self[i]), t1[i], t2[i], value);            \
    });                                                                                            \
  }                                                                                                \
  std::vector<at::Tensor> name##_scalars(at::TensorList self, at::TensorList t1,                   \
                                         at::TensorList t2, at::ArrayRef<at::Scalar> values) {     \
    same_length("_foreach_" #name, self.size(), values.size());                                    \
    same_length("_foreach_" #name, self.size(), t1.size());                                        \
    same_length("_foreach_" #name, self.size(), t2.size());                                        \
    return results(self.size(), [&](size_t i) {                                                    \
      return at::_ops::name::redispatch(kDevice, self[i], t1[i], t2[i], values[i]);                \
    });                                                                                            \
  }                                                                                                \
  void name##_scalars_(at::TensorList self, at::TensorList t1, at::TensorList t2,                  \
                       at::ArrayRef<at::Scalar> values) {                                          \
    same_length("_foreach_" #name "_", self.size(), values.size());                                \
    same_length("_foreach_" #name "_", self.size(), t1.size());                                    \
    same_length("_foreach_" #name "_", self.size(), t2.size());                                    \
    in_place("_foreach_" #name "_", self, [&](size_t i) {                                          \
      return at::_ops::name##_::redispatch(kDevice, mut(self[i]), t1[i], t2[i], values[i]);        \
    });                                                                                            \
  }                                                                                                \
  std::vector<at::Tensor> name##_tensor(at::TensorList self, at::TensorList t1, at::TensorList t2, \
                                        const at::Tensor& values) {                                \
    return name##_scalars(self, t1, t2, numbers("_foreach_" #name, values, self.size()));          \
  }                                                                                                \
  void name##_tensor_(at::TensorList self, at::TensorList t1, at::TensorList t2,                   \
                      const at::Tensor& values) {                                                  \
    name##_scalars_(self, t1, t2, numbers("_foreach_" #name "_", values, self.size()));            \
  }
LT_FOREACH_POINTWISE(addcmul)
LT_FOREACH_POINTWISE(addcdiv)
#undef LT_FOREACH_POINTWISE

// --- lerp: toward a list of tensors, by a number, one number per tensor, or tensors.

std::vector<at::Tensor> lerp_scalar(at::TensorList self, at::TensorList end,
                                    const at::Scalar& weight) {
  same_length("_foreach_lerp", self.size(), end.size());
  return results(self.size(), [&](size_t i) {
    return at::_ops::lerp_Scalar::redispatch(kDevice, self[i], end[i], weight);
  });
}

void lerp_scalar_(at::TensorList self, at::TensorList end, const at::Scalar& weight) {
  same_length("_foreach_lerp_", self.size(), end.size());
  in_place("_foreach_lerp_", self, [&](size_t i) {
    return at::_ops::lerp__Scalar::redispatch(kDevice, mut(self[i]), end[i], weight);
  });
}

std::vector<at::Tensor> lerp_scalars(at::TensorList self, at::TensorList end,
                                     at::ArrayRef<at::Scalar> weights) {
  same_length("_foreach_lerp", self.size(), end.size());
  same_length("_foreach_lerp", self.size(), weights.size());
  return results(self.size(), [&](size_t i) {
    return at::_ops::lerp_Scalar::redispatch(kDevice, self[i], end[i], weights[i]);
  });
}

void lerp_scalars_(at::TensorList self, at::TensorList end, at::ArrayRef<at::Scalar> weights) {
  same_length("_foreach_lerp_", self.size(), end.size());
  same_length("_foreach_lerp_", self.size(), weights.size());
  in_place("_foreach_lerp_", self, [&](size_t i) {
    return at::_ops::lerp__Scalar::redispatch(kDevice, mut(self[i]), end[i], weights[i]);
  });
}

std::vector<at::Tensor> lerp_list(at::TensorList self, at::TensorList end, at::TensorList weights) {
  same_length("_foreach_lerp", self.size(), end.size());
  same_length("_foreach_lerp", self.size(), weights.size());
  return results(self.size(), [&](size_t i) {
    return at::_ops::lerp_Tensor::redispatch(kDevice, self[i], end[i], weights[i]);
  });
}

void lerp_list_(at::TensorList self, at::TensorList end, at::TensorList weights) {
  same_length("_foreach_lerp_", self.size(), end.size());
  same_length("_foreach_lerp_", self.size(), weights.size());
  in_place("_foreach_lerp_", self, [&](size_t i) {
    return at::_ops::lerp__Tensor::redispatch(kDevice, mut(self[i]), end[i], weights[i]);
  });
}

// --- pow: to a number, to one number per tensor, to a list of tensors; a number to a list.

std::vector<at::Tensor> pow_scalar(at::TensorList self, const at::Scalar& exponent) {
  return results(self.size(), [&](size_t i) {
    return at::_ops::pow_Tensor_Scalar::redispatch(kDevice, self[i], exponent);
  });
}

void pow_scalar_(at::TensorList self, const at::Scalar& exponent) {
  in_place("_foreach_pow_", self, [&](size_t i) {
    return at::_ops::pow__Scalar::redispatch(kDevice, mut(self[i]), exponent);
  });
}

std::vector<at::Tensor> pow_scalars(at::TensorList self, at::ArrayRef<at::Scalar> exponents) {
  same_length("_foreach_pow", self.size(), exponents.size());
  return results(self.size(), [&](size_t i) {
    return at::_ops::pow_Tensor_Scalar::redispatch(kDevice, self[i], exponents[i]);
  });
}

void pow_scalars_(at::TensorList self, at::ArrayRef<at::Scalar> exponents) {
  same_length("_foreach_pow_", self.size(), exponents.size());
  in_place("_foreach_pow_", self, [&](size_t i) {
    return at::_ops::pow__Scalar::redispatch(kDevice, mut(self[i]), exponents[i]);
  });
}

std::vector<at::Tensor> pow_list(at::TensorList self, at::TensorList exponents) {
  same_length("_foreach_pow", self.size(), exponents.size());
  return results(self.size(), [&](size_t i) {
    return at::_ops::pow_Tensor_Tensor::redispatch(kDevice, self[i], exponents[i]);
  });
}

void pow_list_(at::TensorList self, at::TensorList exponents) {
  same_length("_foreach_pow_", self.size(), exponents.size());
  in_place("_foreach_pow_", self, [&](size_t i) {
    return at::_ops::pow__Tensor::redispatch(kDevice, mut(self[i]), exponents[i]);
  });
}

std::vector<at::Tensor> number_pow(const at::Scalar& base, at::TensorList exponents) {
  return results(exponents.size(), [&](size_t i) {
    return at::_ops::pow_Scalar::redispatch(kDevice, base, exponents[i]);
  });
}

// --- Unary ops, zero_, copy_, norms and maxima.

template <class Op>
std::vector<at::Tensor> unary(at::TensorList self) {
  return results(self.size(), [&](size_t i) { return Op::redispatch(kDevice, self[i]); });
}

template <class InPlace>
void unary_(at::TensorList self) {
  in_place(InPlace::name, self,
           [&](size_t i) { return InPlace::redispatch(kDevice, mut(self[i])); });
}

void zero_(at::TensorList self) {
  for (const at::Tensor& t : self) write(t, lt::zeros({}, to_engine(t.scalar_type(), "zero_")));
}

void copy_(at::TensorList self, at::TensorList src, bool non_blocking) {
  same_length("_foreach_copy_", self.size(), src.size());
  // Sources may be on the CPU (a checkpoint's tensors): each is brought over first, so a bad one
  // fails before any tensor of the list is written.
  std::vector<lt::Tensor> values;
  values.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    TORCH_CHECK(at::is_expandable_to(src[i].sizes(), self[i].sizes()), "_foreach_copy_: source ", i,
                " of shape ", src[i].sizes(), " does not broadcast to ", self[i].sizes());
    values.push_back(is_device_tensor(src[i])
                         ? read(src[i])
                         : read(src[i].to(self[i].device(), src[i].scalar_type(), non_blocking)));
  }
  for (size_t i = 0; i < self.size(); ++i) write(self[i], values[i]);
}

std::vector<at::Tensor> norms(at::TensorList self, const at::Scalar& ord,
                              std::optional<at::ScalarType> dtype) {
  return results(self.size(), [&](size_t i) {
    return at::_ops::linalg_vector_norm::redispatch(kDevice, self[i], ord, std::nullopt, false,
                                                    dtype);
  });
}

std::vector<at::Tensor> maxima(at::TensorList self) {
  return results(self.size(), [&](size_t i) {
    return at::_ops::amax::redispatch(kDevice, self[i], at::IntArrayRef{}, false);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_foreach_add.Scalar", add_scalar);
  m.impl("_foreach_add_.Scalar", add_scalar_);
  m.impl("_foreach_add.ScalarList", add_scalars);
  m.impl("_foreach_add_.ScalarList", add_scalars_);
  m.impl("_foreach_add.List", add_list);
  m.impl("_foreach_add_.List", add_list_);
  m.impl("_foreach_add.Tensor", add_tensor);
  m.impl("_foreach_add_.Tensor", add_tensor_);
  m.impl("_foreach_sub.Scalar", sub_scalar);
  m.impl("_foreach_sub_.Scalar", sub_scalar_);
  m.impl("_foreach_sub.ScalarList", sub_scalars);
  m.impl("_foreach_sub_.ScalarList", sub_scalars_);
  m.impl("_foreach_sub.List", sub_list);
  m.impl("_foreach_sub_.List", sub_list_);
#define LT_REGISTER(name)                                    \
  m.impl("_foreach_" #name ".Scalar", name##_scalar);        \
  m.impl("_foreach_" #name "_.Scalar", name##_scalar_);      \
  m.impl("_foreach_" #name ".ScalarList", name##_scalars);   \
  m.impl("_foreach_" #name "_.ScalarList", name##_scalars_); \
  m.impl("_foreach_" #name ".List", name##_list);            \
  m.impl("_foreach_" #name "_.List", name##_list_);
  LT_REGISTER(mul)
  LT_REGISTER(div)
  LT_REGISTER(maximum)
  LT_REGISTER(minimum)
  LT_REGISTER(clamp_min)
  LT_REGISTER(clamp_max)
  LT_REGISTER(lerp)
  LT_REGISTER(pow)
#undef LT_REGISTER
  m.impl("_foreach_mul.Tensor", mul_tensor);
  m.impl("_foreach_mul_.Tensor", mul_tensor_);
  m.impl("_foreach_div.Tensor", div_tensor);
  m.impl("_foreach_div_.Tensor", div_tensor_);
  m.impl("_foreach_pow.ScalarAndTensor", number_pow);
#define LT_REGISTER(name)                                    \
  m.impl("_foreach_" #name ".Scalar", name##_scalar);        \
  m.impl("_foreach_" #name "_.Scalar", name##_scalar_);      \
  m.impl("_foreach_" #name ".ScalarList", name##_scalars);   \
  m.impl("_foreach_" #name "_.ScalarList", name##_scalars_); \
  m.impl("_foreach_" #name ".Tensor", name##_tensor);        \
  m.impl("_foreach_" #name "_.Tensor", name##_tensor_);
  LT_REGISTER(addcmul)
  LT_REGISTER(addcdiv)
#undef LT_REGISTER
#define LT_REGISTER(name)                           \
  m.impl("_foreach_" #name, unary<at::_ops::name>); \
  m.impl("_foreach_" #name "_", unary_<at::_ops::name##_>);
  LT_REGISTER(neg)
  LT_REGISTER(abs)
  LT_REGISTER(sqrt)
  LT_REGISTER(rsqrt)
  LT_REGISTER(exp)
  LT_REGISTER(log)
  LT_REGISTER(tanh)
  LT_REGISTER(sigmoid)
  LT_REGISTER(reciprocal)
  LT_REGISTER(sign)
  LT_REGISTER(erf)
#undef LT_REGISTER
  m.impl("_foreach_zero_", zero_);
  m.impl("_foreach_copy_", copy_);
  m.impl("_foreach_norm.Scalar", norms);
  m.impl("_foreach_max", maxima);
}

}  // namespace lazytensor_torch
