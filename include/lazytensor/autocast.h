#pragma once
#include <vector>

#include "lazytensor/dtype.h"
#include "lazytensor/tensor.h"

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
// accumulated over the batch in f32. A product's backward runs in the precision its forward
// was recorded in, whatever the guard when backward() runs.
//
// A tensor's bf16 copy is kept with it while it lives and reused by every product until the
// tensor is written (the query, key and value products of one input cast it once). The copy
// belongs to the tensor object: a view taken anew for each product (`x @ w.t()`) casts again
// each time (linear() reads its weight's own copy). For a
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

// Makes the kept bf16 copies of these f32 tensors (a model's parameters, inputs every step
// multiplies) now, pending until the next mark_step(). Without it the first step traced under
// autocast makes them, so its graph differs from every later step's (which read the copies)
// and a run compiles twice; called before the first step, a run compiles its step once. Other
// dtypes are skipped. A parameter no product reads loses its copy at its first write.
void make_autocast_copies(const std::vector<Tensor>& tensors);

}  // namespace lt
