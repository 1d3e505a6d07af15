#pragma once
// Free-function ops with PyTorch's names and semantics (torch.* and torch.nn.functional.*).
// All are differentiable where PyTorch's are, and all record lazily like every op.
#include <cstdint>
#include <optional>
#include <vector>

#include "lazytensor/tensor.h"

namespace lt {

// Matrix products through the GEMM library (docs/autograd.md, "Matmul through a GEMM library":
// which one, and why). matmul broadcasts batch dims and takes 1-D operands as torch.matmul does;
// bmm takes [B, M, K] x [B, K, N].
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
// x [..., in] times weight [out, in] transposed, plus bias [out] when defined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

Tensor cat(const std::vector<Tensor>& tensors, int dim = 0);
// A strided window on t's elements taken in row-major order, as torch.as_strided on a
// contiguous tensor: element (i0, i1, ...) is element offset + sum(i_d * strides[d]) of t
// flattened. A view: no data moves. Its gradient adds into each element read (repeats add up).
Tensor as_strided(const Tensor& t, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& strides, int64_t offset = 0);
// t with the window as_strided(t, sizes, strides, offset) replaced by src (broadcast to the
// window, cast to t's dtype), as torch.as_strided_scatter: how a write through a view reaches
// its base. The window must not name an element twice.
Tensor as_strided_scatter(const Tensor& t, const Tensor& src, const std::vector<int64_t>& sizes,
                          const std::vector<int64_t>& strides, int64_t offset = 0);
// Elements of `a` where `condition` holds, else of `b` (all three broadcast together).
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);

// Sorting along `dim`, on the device: the i64 positions that sort x (stably: equal elements keep
// their order; NaN above every number), as torch.argsort(stable=True).
Tensor argsort(const Tensor& x, int dim = -1, bool descending = false);
struct ValuesIndices {
  Tensor values, indices;
};
// The sorted values and their positions, as torch.sort(stable=True); the values carry gradients.
ValuesIndices sort(const Tensor& x, int dim = -1, bool descending = false);
// The k largest (or smallest) elements along `dim`, largest (smallest) first, and their
// positions, as torch.topk; ties keep their order.
ValuesIndices topk(const Tensor& x, int64_t k, int dim = -1, bool largest = true);
// The values of `x` at the positions `indices` along `dim` (the other dims of indices as x's),
// as torch.take_along_dim / gather; differentiable in x.
Tensor take_along_dim(const Tensor& x, const Tensor& indices, int dim);
// Running sums along `dim`, as torch.cumsum: floating values accumulated in f64 and rounded to
// their dtype, integer and bool values summed in i64.
Tensor cumsum(const Tensor& x, int dim);
// Rows of `weight` [num_embeddings, dim] at the integer ids: ids.shape + [dim]. The gradient of
// weight is a scatter-add of the output's gradient (repeated ids add up); the row at
// padding_idx (negative counts from the end) gets none, as in torch.nn.functional.embedding.
// The two tensors may come in either order, (ids, weight) as torch's or (weight, ids): the ids
// are the integer one.
Tensor embedding(const Tensor& ids, const Tensor& weight,
                 std::optional<int64_t> padding_idx = std::nullopt);

// elementwise_ops.def's function forms: erf, as torch.erf; the activations, as
// torch.nn.functional's.
#define LT_UNARY_FUNCTION(name, Kind) Tensor name(const Tensor& x);
#define LT_ACTIVATION(name, Kind, p0, d0, p1, d1) \
  Tensor name(const Tensor& x, double p0 = d0, double p1 = d1);
#include "lazytensor/elementwise_ops.def"
// Computed as exp(x - max) / sum: the max is subtracted, so large inputs do not overflow.
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);
Tensor logsumexp(const Tensor& x, const std::vector<int>& dims, bool keepdim = false);
// Normalizes over the last normalized_shape.size() dims (biased variance, as PyTorch), then
// scales by weight and shifts by bias when they are defined.
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);
enum class GeluApproximation { none, tanh };
// x * Phi(x) with the erf form (BERT's), or the tanh approximation.
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::none);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when `train`.
// The mask comes from a counter-based generator (a 32-bit integer hash of the element's
// position under a key mixed from the seed and the draw's offset) whose key is a kernel
// argument: a new mask every call, never a recompile, the same masks from the same
// seed. Its state is set by manual_seed and saved by generator_state.
Tensor dropout(const Tensor& x, double p, bool train = true);

struct GeneratorState {
  uint64_t seed = 0;    // below 2^53
  uint64_t offset = 0;  // draws so far: each dropout takes the next
};
void manual_seed(uint64_t seed);
GeneratorState generator_state();
void set_generator_state(const GeneratorState& state);
// Uniform on [0, 1) from the generator (one draw per call), as torch.rand(shape): computed on
// the device inside the kernels that use the values, never uploaded.
Tensor rand(const Shape& shape, DType dtype = DType::f32);
// x rounded to bf16 up or down at random, with the probability of each proportional to
// x's distance from the other, so the result's expectation is x (stochastic rounding: a sum
// of small updates to a bf16 value, which rounding to nearest would drop, is kept on average).
// One draw of the generator per call; the bits come from a counter-based hash of the draw and
// each element's position, computed inside the kernel. No gradient (the optimizer's tool).
Tensor stochastic_round(const Tensor& x, DType dtype = DType::bf16);
// Standard normal from the generator, as torch.randn(shape). Made on the host from a seed the
// draw determines and uploaded asynchronously: it is for initial weights, once per run.
Tensor randn(const Shape& shape, DType dtype = DType::f32);

enum class Reduction { none, mean, sum };
// logits [N, C] (or [C]) and integer class ids [N]; ids equal to ignore_index count for
// nothing (the mean is over the others). Computed from log_softmax: never log(0).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

}  // namespace lt
