// The backward pass of the table ops: one Function type that evaluates the op's row of
// derivatives.def, so a table op's gradient is a row of a table, not a closure of its own.
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "autograd/function.h"
#include "lazytensor/error.h"
#include "lazytensor/functional.h"

namespace lt::autograd {

namespace {

// What a row keeps for the backward pass: derivatives.def's A, B, C (tensor operands) and Y.
enum Kept : uint8_t { NOTHING = 0, A = 1, B = 2, C = 4, Y = 8 };

constexpr uint32_t row_key(ir::OpKind kind, Operands operands) {
  return static_cast<uint32_t>(kind) << 3 | static_cast<uint32_t>(operands);
}

// The row of (kind, operands) keeps these; an op without a row is the engine's mistake.
uint8_t kept_by(ir::OpKind kind, Operands operands, const char* op) {
  switch (row_key(kind, operands)) {
#define LT_VJP(Kind, form, keeps, ...)            \
  case row_key(ir::OpKind::Kind, Operands::form): \
    return keeps;
#include "autograd/derivatives.def"
#undef LT_VJP
    default:
      throw Error(std::string(op) + ": derivatives.def has no row for this op and operand form");
  }
}

// maximum's and minimum's gradients: to a where `a_wins`, to b where `b_wins`, half to each
// where `tie` (one shared term).
Gradients split_at_ties(const Tensor& g, const Tensor& a, const Tensor& a_wins,
                        const Tensor& b_wins, const Tensor& tie) {
  const Tensor half = indicator(tie, a) * 0.5;
  return Gradients{g * (indicator(a_wins, a) + half), g * (indicator(b_wins, a) + half)};
}

struct TableFunction final : Function {
  TableFunction(const char* op, ir::OpKind kind, Operands operands)
      : Function(op), kind_(kind), operands_(operands) {}

  std::vector<Tensor> apply(const Tensor& g) override {
    if (released_) throw_released(name);
    const Tensor &a = kept_[0], &b = kept_[1], &c = kept_[2], &y = output_;
    const double s0 = numbers_[0], s1 = numbers_[1];
    Gradients grads;
    switch (row_key(kind_, operands_)) {
#define LT_VJP(Kind, form, keeps, ...)            \
  case row_key(ir::OpKind::Kind, Operands::form): \
    grads = Gradients{__VA_ARGS__};               \
    break;
#include "autograd/derivatives.def"
#undef LT_VJP
      default:
        break;  // record() refused it
    }
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = sum_to(grads[i], shapes_[i]);
    return grads;
  }

  void release() override {
    released_ = true;
    kept_ = {};
    output_ = Tensor();
  }

  ir::OpKind kind_;
  Operands operands_;
  bool released_ = false;
  std::array<Tensor, 3> kept_;   // the tensor operands the row reads
  Tensor output_;                // when the row reads it
  std::array<Shape, 3> shapes_;  // of the tensor operands: where gradients are summed back to
  std::array<double, 2> numbers_ = {};
};

}  // namespace

Tensor record(ir::OpKind kind, Operands operands, const char* op, Tensor result,
              std::initializer_list<const Tensor*> tensors, std::initializer_list<double> numbers) {
  const uint8_t keeps = kept_by(kind, operands, op);
  auto function = std::make_shared<TableFunction>(op, kind, operands);
  size_t i = 0;
  for (const Tensor* t : tensors) {
    function->shapes_[i] = t->shape();
    if (keeps & (A << i)) function->kept_[i] = saved(*t);
    ++i;
  }
  if (keeps & Y) function->output_ = saved(result);
  std::copy(numbers.begin(), numbers.end(), function->numbers_.begin());
  return attach(std::move(function), std::move(result), tensors);
}

}  // namespace lt::autograd
