#include "ir/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/op_semantics.h"

namespace lt::ir {

namespace {

double ref_maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}
double ref_minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::min(a, b);
}

double ref_sign(double a) {
  if (std::isnan(a)) return a;
  return a > 0 ? 1.0 : (a < 0 ? -1.0 : 0.0);
}

// A bitwise op on integer values held in doubles (exact to 2^53, as the reference's integers are).
template <class F>
double ref_bitwise(double a, double b, F f) {
  return static_cast<double>(f(static_cast<long long>(a), static_cast<long long>(b)));
}

double ref_gelu_derivative(double a) {
  return 0.5 * (1.0 + std::erf(a / std::numbers::sqrt2)) +
         a * std::exp(-0.5 * a * a) / std::sqrt(2.0 * std::numbers::pi);
}

double no_reference(double, double, double) {
  return std::numeric_limits<double>::quiet_NaN();
}
double identity_reference(double a, double, double) {
  return a;
}

const OpInfo kOpInfos[] = {
    {"DeviceData", OpCategory::Leaf, 0, no_reference},
    {"Scalar", OpCategory::Leaf, 0, no_reference},
    {"Constant", OpCategory::Leaf, 0, no_reference},
#define LT_UNARY(Name, name, expr, ref) \
  {#Name, OpCategory::Elementwise, 1, [](double a, double, double) -> double { return ref; }},
#define LT_BINARY(Name, name, expr, ref) \
  {#Name, OpCategory::Elementwise, 2, [](double a, double b, double) -> double { return ref; }},
#define LT_TERNARY(Name, name, expr, ref) \
  {#Name, OpCategory::Elementwise, 3, [](double a, double b, double c) -> double { return ref; }},
#include "ir/op_table.def"
#undef LT_UNARY
#undef LT_BINARY
#undef LT_TERNARY
    {"Cast", OpCategory::Elementwise, 1, identity_reference},
    {"Iota", OpCategory::Elementwise, 0, no_reference},
    {"StochasticRound", OpCategory::Elementwise, 2, no_reference},
    {"Bernoulli", OpCategory::Elementwise, 2, no_reference},
    {"Sum", OpCategory::Reduction, 1, no_reference},
    {"Mean", OpCategory::Reduction, 1, no_reference},
    {"Max", OpCategory::Reduction, 1, no_reference},
    {"Norm", OpCategory::Reduction, 1, no_reference},
    {"ArgMax", OpCategory::Reduction, 1, no_reference},
    {"View", OpCategory::View, 1, no_reference},
    {"MatMul", OpCategory::Opaque, 2, no_reference},
    {"IndexSelect", OpCategory::Opaque, 2, no_reference},
    {"IndexAdd", OpCategory::Opaque, 2, no_reference},
    {"Cat", OpCategory::Opaque, -1, no_reference},
    {"CheckIndex", OpCategory::Opaque, 1, no_reference},
    {"ArgSort", OpCategory::Opaque, 1, no_reference},
    {"CumSum", OpCategory::Opaque, 1, no_reference},
    {"AllReduce", OpCategory::Opaque, 1, no_reference},
    {"AllGather", OpCategory::Opaque, 1, no_reference},
    {"ReduceScatter", OpCategory::Opaque, 1, no_reference},
    {"Broadcast", OpCategory::Opaque, 1, no_reference},
};
static_assert(sizeof(kOpInfos) / sizeof(kOpInfos[0]) == static_cast<size_t>(OpKind::kCount),
              "every OpKind needs an OpInfo");

}  // namespace

const OpInfo& op_info(OpKind op) {
  return kOpInfos[static_cast<size_t>(op)];
}

}  // namespace lt::ir
