#pragma once
// The recorded graph of autograd: one Function per differentiable op applied to a tensor that
// requires grad, linked to the Functions that produced the op's inputs.
#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "ir/ops.h"
#include "lazytensor/autograd.h"
#include "lazytensor/tensor.h"

namespace lt::autograd {

struct Function {
  explicit Function(const char* op_name);
  // Releases the chain of producers with a loop: a million recorded ops must not overflow
  // the stack when the last output dies.
  virtual ~Function();
  Function(const Function&) = delete;
  Function& operator=(const Function&) = delete;

  // Given the gradient of the op's output, the gradients of its inputs, one per entry of
  // `next` (undefined where none flows).
  virtual std::vector<Tensor> apply(const Tensor& grad_output) = 0;
  // Drops what the backward pass needed (saved tensors), once it has run.
  virtual void release() {}

  const char* name;
  // Creation order: a Function's producers were created before it, so running Functions in
  // decreasing sequence is a topological order of the backward pass.
  uint64_t sequence;
  // Per input of the op: the Function its gradient goes to, or null (needs no gradient).
  std::vector<std::shared_ptr<Function>> next;
};

// A leaf's Function: adds the gradient to the leaf's grad().
struct AccumulateGrad final : Function {
  explicit AccumulateGrad(const std::shared_ptr<TensorImpl>& leaf);
  std::vector<Tensor> apply(const Tensor& grad_output) override;
  std::weak_ptr<TensorImpl> leaf;
};

// What a tensor knows about autograd. Tensors that never met autograd have none.
struct Meta {
  bool requires_grad = false;         // leaves: set by requires_grad_()
  std::shared_ptr<Function> grad_fn;  // results of recorded ops
  Tensor grad;                        // leaves: the accumulated gradient
  std::weak_ptr<Function> accumulator;
};

// True when grad mode is on and one of `inputs` requires grad: only then is an op recorded.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool requires_grad(const Tensor& t);

using Gradients = std::vector<Tensor>;
using BackwardFn = std::function<Gradients(const Tensor& grad_output)>;

// Makes `result` the output of a recorded op over `inputs` whose gradients `backward`
// computes (in the order of `inputs`). Call only when needs_grad(inputs).
Tensor record(const char* op, Tensor result, std::initializer_list<const Tensor*> inputs,
              BackwardFn backward);
Tensor record(const char* op, Tensor result, const std::vector<Tensor>& inputs,
              BackwardFn backward);

// Which operands of a table op are tensors and which numbers, in operand order: with the
// OpKind, what picks the op's row in derivatives.def.
enum class Operands : uint8_t {
  tensor,
  tensor_tensor,
  tensor_tensor_tensor,
  tensor_number,
  tensor_number_number,
  number_tensor,
  tensor_tensor_number,
};

// Makes `result` the output of the table op `kind` over `tensors` and `numbers` (each in operand
// order), whose gradients are its row of derivatives.def: no closure, and only what the row reads
// is kept. Call only when needs_grad(tensors).
Tensor record(ir::OpKind kind, Operands operands, const char* op, Tensor result,
              std::initializer_list<const Tensor*> tensors,
              std::initializer_list<double> numbers = {});

// Makes `result` the output of `function`, whose `next` it fills from `inputs`.
Tensor attach(std::shared_ptr<Function> function, Tensor result,
              std::initializer_list<const Tensor*> inputs);

// The error of running a Function whose saved values an earlier backward() released.
[[noreturn]] void throw_released(const char* op);

// A handle on t's current value that no autograd and no later in-place update of t reaches:
// what a backward function keeps of its inputs.
Tensor saved(const Tensor& t);

// The gradient `grad` of a broadcast result summed back to `shape`, as broadcasting's
// derivative.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// 1 where `mask` holds, else 0, in `like`'s dtype.
Tensor indicator(const Tensor& mask, const Tensor& like);

// Called by ops that rebind a tensor in place: lt::Error when autograd would be bypassed.
void check_in_place(const Tensor& self, const char* op);
// Remembers, for the op being traced on this thread, that an operand requires grad.
void note_operand(const Tensor& t);
void reset_operand_note();

}  // namespace lt::autograd
