// torch.autocast("lazytensor", dtype=torch.bfloat16): PyTorch's own autocast wrappers, registered
// under the device's autocast key with PyTorch's op lists for non-CPU devices (the lists that
// CUDA, XPU and MPS use). Products, linear layers and attention take bf16 copies of their
// operands and give bf16 results; norms, softmax, losses and reductions run in f32; mixed-dtype
// ops take the widest. The copies are device ops like any other, traced and fused with the step;
// PyTorch caches a parameter's copy for the rest of the autocast region. Every other op falls
// through to the device's own kernels: PyTorch registers that fallthrough for its own devices'
// autocast keys, not for PrivateUse1's, so it is registered here.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace lazytensor_torch {

// The op lists spell their signatures as ATen's own sources do, inside namespace at.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define LAZYTENSOR_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define LAZYTENSOR_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define LAZYTENSOR_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define LAZYTENSOR_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
#define LAZYTENSOR_DIFFERENT_REDISPATCH_SIGNATURE(                                    \
    REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY) \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(                                \
      REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, POLICY)
  AT_FORALL_LOWER_PRECISION_FP(LAZYTENSOR_LOWER_PRECISION)
  AT_FORALL_FP32(LAZYTENSOR_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(LAZYTENSOR_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(LAZYTENSOR_DIFFERENT_REDISPATCH_SIGNATURE)
  AT_FORALL_PROMOTE(LAZYTENSOR_PROMOTE)
  // The lists leave cross_entropy to its parts, and its log_softmax names the input's dtype, so a
  // bf16 model's loss would be a bf16 log_softmax (BertForMaskedLM's, 10.5 for 10.487): in f32,
  // as PyTorch's CPU autocast has it.
  LAZYTENSOR_FP32(cross_entropy_loss)
  // binary_cross_entropy is not in the lists (CUDA's autocast raises for it: a bf16 probability
  // rounded to 0 or 1 gives an infinite log), and a bf16 probability met an f32 target in the
  // device's kernel, which raised a dtype mismatch. In f32, as PyTorch's CPU autocast has it.
  LAZYTENSOR_FP32(binary_cross_entropy)
#undef LAZYTENSOR_LOWER_PRECISION
#undef LAZYTENSOR_FP32
#undef LAZYTENSOR_FP32_SET_OPT_DTYPE
#undef LAZYTENSOR_PROMOTE
#undef LAZYTENSOR_DIFFERENT_REDISPATCH_SIGNATURE
}

}  // namespace lazytensor_torch
