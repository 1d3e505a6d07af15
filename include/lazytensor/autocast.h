#pragma once
#include "lazytensor/dtype.h"

// Autocast, as torch.autocast("cpu", dtype=torch.bfloat16): while an AutocastGuard(DType::bf16)
// lives on a thread, the matrix products traced there (matmul, bmm, linear, and the models'
// layers built on them) multiply bf16 copies of their f32 operands, accumulate in f32 and give
// f32 results. Everything else (softmax, layer norm, GELU, losses, reductions, the optimizer)
// keeps computing in f32 on those results, so the parameters stay f32 master weights.
//
// Where it differs from torch.autocast: a product's result is f32, not bf16. The ops that
// follow a product run fused with it in f32 anyway, so rounding its result to bf16 would only
// lose bits; the next product's bf16 copy is written by the kernel that computes its operand.
// Gradients follow the same rule: the backward products take bf16 copies of the output
// gradient and of the saved bf16 operands and give f32 gradients, so a weight's gradient is
// accumulated over the batch in f32.
//
// A tensor's bf16 copy is kept with it while it lives and reused by every product until the
// tensor is written (the query, key and value products of one input cast it once). For a
// parameter (a leaf tensor that requires grad) written by a traced step (an optimizer's
// update) whose copy was read since the copy was made, mark_step() traces the new copy into
// the same graph: the copy is one more output of the kernel that updates the parameter, not a
// pass of its own. A parameter's copy not read between two writes is dropped. Writes are the
// engine's in-place ops: memory shared with NumPy or DLPack and written from outside is not
// seen by a kept copy (nor by anything else the engine has derived from it).
namespace lt {

class AutocastGuard {
 public:
  // DType::bf16 turns autocast on for this thread while the guard lives; DType::f32 turns it
  // off (a full-precision region inside an autocast one). Other dtypes: lt::Error.
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
};

// The calling thread's autocast dtype: bf16 inside an AutocastGuard(DType::bf16), else f32.
DType autocast_dtype();
bool is_autocast_enabled();

}  // namespace lt
