// The native kernel path: generated C++ compiled by the system compiler, loaded with dlopen and
// cached in memory and on disk. Every elementwise op, NaN and infinity included, matches the
// reference; one compiled kernel serves every shape and every scalar value; in-place kernels
// write into donated buffers correctly.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/cpu/kernels/kernel_prelude.h"
#include "ir/node.h"
#include "ir/ops.h"
#include "runtime/config.h"
#include "runtime/tensor_impl.h"
#include "test_support.h"
#include "trace/trace.h"

namespace {

using lt_test::counter;
using lt_test::Restore;
using lt_test::TempDir;
using lt_test::Tol;

namespace fs = std::filesystem;
using lt::DType;
using lt::Shape;
using lt::Tensor;
using lt::compiler::Instr;
using lt::compiler::InstrKind;
using lt::compiler::KernelProgram;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr Tol kF32{1e-5, 1e-6};
constexpr Tol kF32Transcendental{1e-5, 1e-5};
constexpr Tol kF64{1e-12, 1e-12};
constexpr Tol kF32Reduce{1e-4, 1e-4};

// Equal within tolerance, or both NaN, or the same infinity.
bool same(double got, double want, Tol tol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  return got == want || std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want);
}

// One failure naming the first mismatch and the count, rather than one failure per element.
void expect_same(const std::vector<double>& got, const std::vector<double>& want, Tol tol) {
  ASSERT_EQ(got.size(), want.size());
  size_t bad = 0;
  size_t first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (same(got[i], want[i], tol)) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << "first mismatch at " << first << ": got " << got[first] << ", want "
                     << want[first];
}

// Kernels obtained from the native compiler: compiled now or loaded from the disk cache.
int64_t native_kernels() {
  return counter("KernelCompile") + counter("KernelDiskCacheHit");
}

class CodegenTest : public testing::Test, protected lt_test::Seeded {
 protected:
  // Native code from the first launch on (no tiering), so every check runs compiled kernels.
  // Nothing compiled by an earlier test stays in memory: a test's first step obtains every
  // kernel it runs from the native compiler (compiled or loaded from the disk cache).
  void SetUp() override {
    lt::set_kernel_compiler("native");
    lt::set_tiered_compilation(false);
    settle();
    lt::clear_compile_caches();
    failures_ = counter("NativeCompileFailure");
  }
  void TearDown() override {
    // The native path falls back to the interpreter when it cannot compile or load a kernel.
    if (!HasFailure()) {
      EXPECT_LE(counter("NativeCompileFailure"), failures_)
          << "a native compile failed; the interpreter ran";
    }
    settle();
    lt::set_tiered_compilation(true);
    lt::set_kernel_compiler("interpreter");
  }

  // What the engine would hand the native compiler, for tests that call it directly.
  static lt::backend::KernelSettings native_options() {
    lt::backend::KernelSettings options;
    options.cache_dir = lt::kernel_cache_dir();
    options.cache_bytes = size_t{256} << 20;
    return options;
  }

  int64_t failures_ = 0;

  // Unlike lt_test::settle(), keeps the counters: TearDown compares NativeCompileFailure with
  // its value at SetUp.
  static void settle() {
    lt::mark_step();
    lt::wait_device_ops();
  }

  // Values in [lo, hi), exactly representable in `dtype`.
  Tensor uniform(const Shape& shape, double lo, double hi, DType dtype) {
    std::vector<double> values(static_cast<size_t>(shape.numel()));
    for (double& v : values) v = scalar(lo, hi);
    return upload(values, shape, dtype);
  }
  static Tensor upload(const std::vector<double>& values, const Shape& shape, DType dtype) {
    if (dtype == DType::f64) return lt::from_vector(values, shape);
    return lt::from_vector(std::vector<float>(values.begin(), values.end()), shape);
  }
};

struct Output {
  std::string name;
  Tensor tensor;
  Tol tol;
};

// GELU's backward pass, the only way to its derivative op: gelu(x)'s gradient weighted by w.
Tensor gelu_gradient(const Tensor& x, const Tensor& w) {
  Tensor leaf = x.detach();
  leaf.requires_grad_();
  return lt::grad({lt::gelu(leaf)}, {leaf}, {w})[0];
}

// Every elementwise op of x (any sign), y (positive) and w (in [0, 1]), each through the
// Tensor API. The caller chooses the inputs' values.
std::vector<Output> every_op(const Tensor& x, const Tensor& y, const Tensor& w) {
  const bool f64 = x.dtype() == DType::f64;
  const Tol arithmetic = f64 ? kF64 : kF32;
  const Tol transcendental = f64 ? kF64 : kF32Transcendental;
  return {
      {"neg", x.neg(), arithmetic},
      {"abs", x.abs(), arithmetic},
      {"sqrt", y.sqrt(), arithmetic},
      {"rsqrt", y.rsqrt(), transcendental},
      {"exp", x.exp(), transcendental},
      {"log", y.log(), transcendental},
      {"tanh", x.tanh(), transcendental},
      {"sigmoid", x.sigmoid(), transcendental},
      {"relu", x.relu(), arithmetic},
      {"add", x + y, arithmetic},
      {"sub", x - y, arithmetic},
      {"mul", x * y, arithmetic},
      {"div", x / y, arithmetic},
      {"floor_divide", x.floor_divide(y), arithmetic},
      {"remainder", x.remainder(y), arithmetic},
      {"pow", y.pow(2.5), transcendental},
      {"pow_square", x.pow(2.0), arithmetic},
      {"pow_one", x.pow(1.0), arithmetic},
      {"maximum", x.maximum(y), arithmetic},
      {"minimum", x.minimum(y), arithmetic},
      {"clamp", x.clamp(-1.5, 0.75), arithmetic},
      {"lerp_scalar", x.lerp(y, 0.3), arithmetic},
      {"lerp_tensor", x.lerp(y, w), arithmetic},
      {"clone", x.clone(), arithmetic},
      {"cast", x.to(f64 ? DType::f32 : DType::f64).add(1.0), kF32},
      {"add_alpha", x.add(y, -0.7), arithmetic},
      {"addcmul", x.addcmul(y, w, 0.4), arithmetic},
      {"addcdiv", x.addcdiv(w, y, -1.3), arithmetic},
      {"erf", x.erf(), transcendental},
      {"sin", x.sin(), transcendental},
      {"cos", x.cos(), transcendental},
      {"sign", x.sign(), arithmetic},
      {"gelu_derivative", gelu_gradient(x, w), transcendental},
      {"eq", x.eq(x.clamp(-1.0, 1.0)), arithmetic},
      {"ne", x.ne(x.clamp(-1.0, 1.0)), arithmetic},
      {"lt", x.lt(y), arithmetic},
      {"le", x.le(x.clamp_max(0.5)), arithmetic},
      {"gt", x.gt(w), arithmetic},
      {"ge", x.ge(x.clamp_min(-0.5)), arithmetic},
      {"where", lt::where(x.gt(0.0), y, w), arithmetic},
      // Both sides of the threshold, and inputs whose 1 + e^(beta x) rounds to 1.
      {"softplus", lt::softplus(x * 10.0, 1.5, 12.0), arithmetic},
      // Iota and Uniform: a Philox draw, bit for bit the reference's.
      {"rand", lt::rand(x.shape(), x.dtype()), arithmetic},
      // Bernoulli draws from the hash, bit for bit the reference's.
      {"dropout", lt::dropout(x, 0.3), arithmetic},
      // The random bits are the reference's too: the same bf16 values, bit for bit.
      {"stochastic_round", lt::stochastic_round(x * y), arithmetic},
      // The 8-bit maps: nearest codes and their values, bit for bit the reference's.
      {"dynamic8_signed", lt::trace::dequantize8(lt::trace::quantize8(x * (1 / 3.0), false), false),
       arithmetic},
      {"dynamic8_unsigned", lt::trace::dequantize8(lt::trace::quantize8(w, true), true),
       arithmetic},
  };
}

// Integer and bool programs over a (any sign) and b (nonzero, either sign), i64 values far
// below 2^53, so the reference's doubles are exact and every result must be equal.
std::vector<Output> integer_ops(const Tensor& a, const Tensor& b) {
  constexpr Tol exact{0, 0};
  const Tensor small = a.remainder(5.0);
  const Tensor positive = a.gt(0.0), b_positive = b.gt(0.0);
  return {
      {"add", a + b, exact},
      {"sub", a - b * 3.0, exact},
      {"mul", a * b, exact},
      {"neg", a.neg(), exact},
      {"abs", a.abs(), exact},
      {"sign", a.sign(), exact},
      {"relu", a.relu(), exact},
      {"maximum", a.maximum(b), exact},
      {"minimum", a.minimum(b), exact},
      {"clamp", a.clamp(-20.0, 20.0), exact},
      {"floor_divide", a.floor_divide(b), exact},
      {"remainder", a.remainder(b), exact},
      {"floor_divide_number", a.floor_divide(-3.0), exact},
      {"pow", small.pow(3.0) + b.pow(2.0) + b.pow(-1.0), exact},
      {"bitwise_and", a.bitwise_and(b), exact},
      {"bitwise_or", a.bitwise_or(b), exact},
      {"bitwise_xor", a.bitwise_xor(b), exact},
      {"compare", a.lt(b).to(DType::i64) + a.eq(b.neg()).to(DType::i64) * 2.0, exact},
      {"where", lt::where(positive, a, b), exact},
      {"bool_ops",
       (positive * b_positive).to(DType::i64) + (positive + b_positive).to(DType::i64) * 2.0 +
           positive.bitwise_xor(b_positive).to(DType::i64) * 4.0,
       exact},
      {"i32", a.to(DType::i32) * b.to(DType::i32) - 7.0, exact},
      {"true_division_is_f32", a / b, kF32},
      {"sum", (a * b).sum({1}), exact},
      {"count", positive.sum(), exact},
      {"max", a.max({1}), exact},
      {"argmax", a.argmax(1), exact},
  };
}

// The ops reachable from the outputs' IR.
std::set<lt::ir::OpKind> ops_in(const std::vector<Output>& outputs) {
  std::set<lt::ir::OpKind> ops;
  std::vector<const lt::ir::Node*> stack;
  for (const Output& out : outputs) stack.push_back(out.tensor.impl()->ir.get());
  while (!stack.empty()) {
    const lt::ir::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr) continue;
    ops.insert(node->op);
    for (int i = 0; i < node->num_operands(); ++i) stack.push_back(node->operands[i].get());
  }
  return ops;
}

// Launches `outputs` as one step and compares each with its reference.
void check_outputs(const std::vector<Output>& outputs) {
  std::vector<std::vector<double>> want;
  for (const Output& out : outputs) want.push_back(lt::reference::evaluate(out.tensor));
  // One step: every kernel the outputs need goes to the system compiler in one run.
  lt::mark_step();
  for (size_t i = 0; i < outputs.size(); ++i) {
    SCOPED_TRACE(outputs[i].name);
    expect_same(outputs[i].tensor.to_vector<double>(), want[i], outputs[i].tol);
  }
}

TEST_F(CodegenTest, EveryElementwiseOpMatchesTheReference) {
  // Not a multiple of the vector width: the loop's tail runs too.
  const Shape shape{1037};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    const std::vector<Output> outputs = every_op(
        uniform(shape, -3, 3, dtype), uniform(shape, 0.25, 4, dtype), uniform(shape, 0, 1, dtype));
    // A new op in op_table.def needs a line in every_op (or integer_ops, for the ops that
    // floating values do not have).
    std::set<lt::ir::OpKind> covered = ops_in(outputs);
    for (lt::ir::OpKind op : ops_in(
             integer_ops(lt::arange(4.0).reshape({2, 2}), lt::arange(1.0, 5.0).reshape({2, 2})))) {
      covered.insert(op);
    }
    for (int k = 0; k < static_cast<int>(lt::ir::OpKind::kCount); ++k) {
      const auto op = static_cast<lt::ir::OpKind>(k);
      if (lt::ir::is_elementwise(op)) {
        EXPECT_TRUE(covered.count(op)) << lt::ir::op_info(op).name << " is not tested";
      }
    }
    check_outputs(outputs);
  }
}

TEST_F(CodegenTest, IntegerOpsMatchTheReference) {
  const Shape shape{13, 83};
  std::vector<int64_t> av, bv;
  for (int64_t i = 0; i < shape.numel(); ++i) {
    av.push_back(static_cast<int64_t>(scalar(-1000, 1000)));
    const int64_t b = static_cast<int64_t>(scalar(1, 10));
    bv.push_back(i % 2 ? b : -b);
  }
  for (const char* compiler : {"native", "interpreter"}) {
    SCOPED_TRACE(compiler);
    lt::set_kernel_compiler(compiler);
    check_outputs(integer_ops(lt::from_vector(av, shape), lt::from_vector(bv, shape)));
  }
}

// Integer division by zero is defined rather than trapping (a kernel cannot raise PyTorch's
// ZeroDivisionError): a // 0 is 0 and a % 0 is a; the minimum divided by -1 wraps, as its
// product with -1 does.
TEST_F(CodegenTest, IntegerDivisionByZeroAndOverflowAreDefined) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const Tensor a = lt::from_vector(std::vector<int64_t>{7, -7, 0, kMin, kMin}, {5});
  const Tensor b = lt::from_vector(std::vector<int64_t>{0, 0, 0, -1, 1}, {5});
  for (const char* compiler : {"native", "interpreter"}) {
    SCOPED_TRACE(compiler);
    lt::set_kernel_compiler(compiler);
    const Tensor quotient = a.floor_divide(b), remainder = a.remainder(b), product = a * b.neg();
    lt::mark_step();
    EXPECT_EQ(quotient.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, kMin, kMin}));
    EXPECT_EQ(remainder.to_vector<int64_t>(), (std::vector<int64_t>{7, -7, 0, 0, 0}));
    EXPECT_EQ(product.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0, kMin, kMin}));
  }
}

// Dropout's masks are the reference's, element for element, in native code and in the
// interpreter, for f32 and bf16: in a row group (after the row max), over more elements than one
// work unit (the position counter starts mid-tensor), and read through a transposed view.
TEST_F(CodegenTest, DropoutMasksMatchTheReferenceEverywhere) {
  const Shape shape{300, 257};
  for (const char* compiler : {"native", "interpreter"}) {
    lt::set_kernel_compiler(compiler);
    for (DType dtype : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(compiler) + " " + lt::dtype_name(dtype));
      const Tensor x = uniform(shape, -3, 3, DType::f32).to(dtype);
      lt::mark_step();
      // Every value at most -1: a zero is a dropped element, nothing else.
      const Tensor shifted = x - x.max({1}, /*keepdim=*/true) - 1.0;
      const std::vector<Tensor> outputs = {lt::dropout(shifted, 0.3),
                                           lt::dropout(x.t() - 4.0, 0.6)};
      std::vector<std::vector<double>> want;
      for (const Tensor& out : outputs) want.push_back(lt::reference::evaluate(out));
      lt::mark_step();
      for (size_t k = 0; k < outputs.size(); ++k) {
        const std::vector<double> got = outputs[k].to_vector<double>();
        ASSERT_EQ(got.size(), want[k].size());
        size_t kept = 0, mismatched = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          kept += got[i] != 0;
          mismatched += (got[i] == 0) != (want[k][i] == 0);
        }
        EXPECT_EQ(mismatched, 0u) << "output " << k;
        EXPECT_GT(kept, 0u);
        EXPECT_LT(kept, got.size());
        expect_same(got, want[k], dtype == DType::bf16 ? Tol{1.0 / 128, 0} : Tol{1e-6, 0});
      }
    }
  }
}

// NaN, infinities and signed zeros propagate as in the reference (and PyTorch).
TEST_F(CodegenTest, SpecialValuesMatchTheReference) {
  const std::vector<double> specials = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0};
  const int64_t k = static_cast<int64_t>(specials.size());
  std::vector<double> xv, yv, wv;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      xv.push_back(specials[i]);
      yv.push_back(specials[j]);
      wv.push_back(specials[(i + j) % k]);
    }
  }
  const Shape shape{k * k};
  for (DType dtype : {DType::f32, DType::f64}) {
    SCOPED_TRACE(lt::dtype_name(dtype));
    check_outputs(
        every_op(upload(xv, shape, dtype), upload(yv, shape, dtype), upload(wv, shape, dtype)));
  }
}

// Kernel identity leaves sizes out: a new shape is a new graph but no new kernel.
TEST_F(CodegenTest, OneCompiledKernelServesEveryShape) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::constant);
  const double c = 1.25;
  auto step = [&](const Shape& a_shape, const Shape& b_shape) {
    const Tensor a = uniform(a_shape, -1, 1, DType::f32);
    const Tensor b = uniform(b_shape, -1, 1, DType::f32);
    const Tensor y = (a * c + b).tanh();
    const std::vector<double> want = lt::reference::evaluate(y);
    lt::mark_step();
    expect_same(y.to_vector<double>(), want, kF32Transcendental);
  };

  const int64_t graphs = counter("UncachedCompile");
  const int64_t kernels = native_kernels();
  step({5001}, {1});
  EXPECT_EQ(counter("UncachedCompile") - graphs, 1);
  EXPECT_EQ(native_kernels() - kernels, 1);
  const size_t cached = lt::kernel_cache_entries();

  const int64_t rows = 1001;
  step({rows, 3}, {rows, 3});
  step({rows, 3}, {3});  // a broadcast operand: gathered, the same kernel
  EXPECT_EQ(counter("UncachedCompile") - graphs, 3);
  EXPECT_EQ(native_kernels() - kernels, 1);
  EXPECT_EQ(lt::kernel_cache_entries(), cached);
}

// Scalars are kernel arguments: any value, NaN and huge ones included, runs the same code.
TEST_F(CodegenTest, ScalarArgumentsNeverRecompile) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::argument);
  const Shape shape{5001};
  const Tensor x32 = uniform(shape, -1, 1, DType::f32);
  const Tensor z32 = uniform(shape, -1, 1, DType::f32);
  const Tensor x64 = uniform(shape, -1, 1, DType::f64);
  settle();

  int64_t graphs = 0;
  int64_t kernels = 0;
  bool first = true;
  for (double s : {0.75, 0.0, 1.0, -1.0, kNaN, 1e30, -1e30, 0.1}) {
    SCOPED_TRACE("s = " + std::to_string(s));
    const Tensor y = x32 * s + z32;
    const Tensor v = z32.clamp_min(s);
    const Tensor w = x64.add(x64, s);
    std::vector<std::vector<double>> want = {lt::reference::evaluate(y), lt::reference::evaluate(v),
                                             lt::reference::evaluate(w)};
    lt::mark_step();
    expect_same(y.to_vector<double>(), want[0], kF32);
    expect_same(v.to_vector<double>(), want[1], kF32);
    expect_same(w.to_vector<double>(), want[2], kF64);
    if (first) {
      graphs = counter("UncachedCompile");
      kernels = native_kernels();
      first = false;
      continue;
    }
    EXPECT_TRUE(lt::last_step_stats().cache_hit);
    EXPECT_EQ(counter("UncachedCompile"), graphs);
    EXPECT_EQ(native_kernels(), kernels);
  }
}

// In-place updates write into the buffers they replace, even when an operand is gathered.
TEST_F(CodegenTest, InPlaceKernelsWriteDonatedBuffersCorrectly) {
  const int64_t n = 5001;
  Tensor p = uniform({n}, -1, 1, DType::f32);
  Tensor m = uniform({n}, -1, 1, DType::f32);
  const Tensor g = uniform({n}, -1, 1, DType::f32);
  Tensor q = uniform({64, 33}, -1, 1, DType::f64);
  const Tensor row = uniform({33}, -1, 1, DType::f64);
  settle();
  std::vector<double> pw = p.to_vector<double>(), mw = m.to_vector<double>();
  std::vector<double> qw = q.to_vector<double>();
  const std::vector<double> gv = g.to_vector<double>(), rv = row.to_vector<double>();

  for (int step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const double lr = 0.1 / step;
    m.mul_(0.9).add_(g, 0.1);
    p.add_(m, -lr);
    q.add_(row).mul_(0.5);
    lt::mark_step();
    EXPECT_EQ(lt::last_step_stats().donated_buffers, 3);
    for (size_t i = 0; i < pw.size(); ++i) {
      mw[i] = mw[i] * 0.9 + 0.1 * gv[i];
      pw[i] -= lr * mw[i];
    }
    for (size_t i = 0; i < qw.size(); ++i) qw[i] = (qw[i] + rv[i % 33]) * 0.5;
  }
  expect_same(m.to_vector<double>(), mw, kF32);
  expect_same(p.to_vector<double>(), pw, kF32);
  expect_same(q.to_vector<double>(), qw, kF64);
}

// Reductions fold the values a native kernel computes from their producers.
// Runs `outputs` as one step and compares each with its reference, to f32 reduction tolerance.
void expect_reductions_match_the_reference(const std::vector<Tensor>& outputs) {
  std::vector<std::vector<double>> want;
  for (const Tensor& t : outputs) want.push_back(lt::reference::evaluate(t));
  lt::mark_step();
  for (size_t i = 0; i < outputs.size(); ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    expect_same(outputs[i].to_vector<double>(), want[i], kF32Reduce);
  }
}

TEST_F(CodegenTest, NativeReductionsMatchTheReference) {
  const int64_t rows = 29;
  const Tensor x = uniform({rows, 77}, -2, 2, DType::f32);
  const Tensor y = uniform({rows, 77}, -2, 2, DType::f32);
  const std::vector<Tensor> outputs = {(x * y + 1.0).sum({1}), (x - y).norm(),
                                       x.exp().mean({0}, /*keepdim=*/true), (x + y).max({1})};
  expect_reductions_match_the_reference(outputs);
}

// Rows of at most half a tile share kernel calls (each row folded from its part of the tile),
// with direct, gathered (a transpose) and bf16 inputs, the last call of a unit short; and a
// reduction of its input as stored folds the input where it lies, over rows and columns.
TEST_F(CodegenTest, ShortRowsAndInputsFoldedInPlaceMatchTheReference) {
  const Tensor narrow = uniform({300, 5}, -2, 2, DType::f32);
  const Tensor tall = uniform({40, 77}, -2, 2, DType::f32);
  const Tensor half_tile = uniform({33, 512}, -2, 2, DType::f32).to(DType::bf16);
  const Tensor columns = uniform({1000, 3}, -2, 2, DType::f32);
  // Rows folded in place four at a time, and the rest one by one.
  const Tensor wide_columns = uniform({1003, 70}, -2, 2, DType::f32);
  const Tensor long_rows = uniform({3, 2500}, -2, 2, DType::f32);
  const std::vector<Tensor> outputs = {narrow.sum({1}),
                                       (narrow * 2.0).max({1}),
                                       tall.transpose(0, 1).sum({1}),
                                       (tall.transpose(0, 1) - 1.0).mean({1}),
                                       half_tile.sum({1}),
                                       columns.sum({0}),
                                       columns.mean({0}),
                                       wide_columns.sum({0}),
                                       long_rows.sum({1}),
                                       long_rows.max({1})};
  expect_reductions_match_the_reference(outputs);
}

// A column sum of an f32 tensor as stored folds its rows where they lie, four at a time; one of
// a kernel's output folds each row from the kernel's tile. Both add the same values in the same
// order: the same bits (x * 1 is x). Rows of 2^80 and -2^80 between small values make each
// column's sum depend on the order of its adds: an f64 sum that meets 2^80 forgets what it held,
// and is left with what comes after the -2^80.
TEST_F(CodegenTest, ColumnSumsInPlaceAndThroughAKernelAreTheSameBits) {
  for (const Shape& shape : {Shape{1003, 70}, Shape{1024, 768}, Shape{7, 5}}) {
    SCOPED_TRACE(shape.str());
    std::vector<float> values(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i) / shape[1];
      values[i] = row % 4 == 1   ? 0x1p80f
                  : row % 4 == 2 ? -0x1p80f
                                 : static_cast<float>(scalar(-1, 1));
    }
    const Tensor x = lt::from_vector(values, shape);
    const Tensor in_place = x.sum({0}), through_kernel = (x * 1.0).sum({0});
    lt::mark_step();
    EXPECT_EQ(in_place.to_vector<double>(), through_kernel.to_vector<double>());
  }
}

// f32 argmax over rows longer than a tile (several folds a row): the first of equal maxima, in
// the same tile or a later one; the first NaN, before or after the maximum; rows of -inf, of
// signed zeros, and rising to their last element.
TEST_F(CodegenTest, F32ArgmaxMatchesTheReferenceOverTiesNaNsAndTiles) {
  constexpr int64_t kCols = 2500;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> rows;
  const auto add_row = [&](const std::function<float(int64_t)>& value) {
    for (int64_t j = 0; j < kCols; ++j) rows.push_back(value(j));
  };
  add_row([&](int64_t) { return static_cast<float>(scalar(-3, 3)); });
  add_row([&](int64_t) { return -inf; });
  add_row([&](int64_t j) { return j == 300 || j == 2100 || j == 2400 ? 9.0f : 1.0f; });
  add_row(
      [&](int64_t j) { return j == 1500 ? static_cast<float>(kNaN) : (j == 2000 ? 7.0f : 0.0f); });
  add_row([&](int64_t j) {
    return j == 5 || j == 10 ? static_cast<float>(kNaN) : static_cast<float>(j);
  });
  add_row([&](int64_t j) { return j % 2 == 0 ? -0.0f : 0.0f; });
  add_row([&](int64_t j) { return static_cast<float>(j); });
  add_row([&](int64_t j) { return j == 17 || j == 1030 ? 5.0f : -1.0f; });
  const Tensor x = lt::from_vector(rows, {static_cast<int64_t>(rows.size()) / kCols, kCols});
  const Tensor indices = (x * 1.0).argmax(1);
  const std::vector<double> want = lt::reference::evaluate(indices);
  lt::mark_step();
  EXPECT_EQ(indices.to_vector<double>(), want);
  EXPECT_EQ(want[2], 300);
  EXPECT_EQ(want[3], 1500);
  EXPECT_EQ(want[4], 5);
  EXPECT_EQ(want[7], 17);
}

// A row repeated over the rows of the iteration space (a bias) is read in place, and a value
// per row (a row's statistic) filled once a row, by calls that end where rows end: here with
// work units that start mid-row, views that start inside their storage, statistics over two
// leading dims and over the middle one of three, rows longer than a call, a row reduction and
// rows short enough to stay in gathered tiles.
TEST_F(CodegenTest, PeriodicAndPerRowInputsMatchTheReference) {
  const Tensor x = uniform(Shape{300, 777}, -2, 2, DType::f32);
  const Tensor bias = uniform(Shape{777}, -1, 1, DType::f32);
  const Tensor stat = uniform(Shape{300, 1}, -1, 1, DType::f32);
  const Tensor storage = uniform(Shape{800}, -1, 1, DType::f32);
  const Tensor cube = uniform(Shape{6, 50, 777}, -2, 2, DType::f32);
  const Tensor cube_stat = uniform(Shape{6, 50, 1}, -1, 1, DType::f32);
  const Tensor middle_stat = uniform(Shape{1, 50, 1}, -1, 1, DType::f32);
  const Tensor long_rows = uniform(Shape{7, 20000}, -2, 2, DType::f32);
  const Tensor long_stat = uniform(Shape{7, 1}, -1, 1, DType::f32);
  const Tensor narrow = uniform(Shape{100, 100}, -2, 2, DType::f32);
  const Tensor narrow_bias = uniform(Shape{100}, -1, 1, DType::f32);
  const Tensor ids = uniform(Shape{300, 1}, 0, 777, DType::f32).to(DType::i64);
  settle();
  const Tensor offset_bias = storage.slice(0, 5, 782);
  const Tensor offset_stat = storage.slice(0, 3, 303).reshape({300, 1});
  check_outputs({
      {"bias", x * 2.0 + bias, kF32},
      {"two_biases", (x + bias) * offset_bias, kF32},
      {"row_sums", (x + bias).sum({1}), kF32Reduce},
      {"stat", x * stat + bias, kF32},
      {"offset_stat", x - offset_stat, kF32},
      {"stat_row_sums", (x * stat).sum({1}), kF32Reduce},
      {"cube_stat", cube * cube_stat + middle_stat, kF32},
      {"long_rows", long_rows * long_stat, kF32},
      {"i64_per_row", lt::arange(777.0).to(DType::i64).eq(ids).to(DType::f32) * x, kF32},
      {"narrow_rows", narrow * narrow_bias - 1.0, kF32},
  });
}

// --- The generated source and the compiler, without the engine around them. ---

int32_t add_instr(KernelProgram& program, InstrKind kind, DType dtype, lt::ir::OpKind op,
                  std::vector<int32_t> args, int32_t index = 0, double constant = 0) {
  Instr instr;
  instr.kind = kind;
  instr.op = op;
  instr.dtype = dtype;
  for (size_t a = 0; a < args.size(); ++a) instr.args[a] = args[a];
  instr.index = index;
  instr.constant = constant;
  if (kind == InstrKind::Input) program.input_dtypes.push_back(dtype);
  if (kind == InstrKind::Scalar) ++program.num_scalars;
  program.instrs.push_back(instr);
  return static_cast<int32_t>(program.instrs.size() - 1);
}

// out0 = (x * s + y) * c, out1 = x * s, out2..4 = NaN, +inf, -inf (constants), in f64.
KernelProgram sample_program(double c) {
  using lt::ir::OpKind;
  constexpr DType f64 = DType::f64;
  KernelProgram p;
  const int32_t x = add_instr(p, InstrKind::Input, f64, OpKind::kCount, {}, 0);
  const int32_t y = add_instr(p, InstrKind::Input, f64, OpKind::kCount, {}, 1);
  const int32_t s = add_instr(p, InstrKind::Scalar, f64, OpKind::kCount, {}, 0);
  const int32_t k = add_instr(p, InstrKind::Constant, f64, OpKind::kCount, {}, 0, c);
  const int32_t xs = add_instr(p, InstrKind::Op, f64, OpKind::Mul, {x, s});
  const int32_t sum = add_instr(p, InstrKind::Op, f64, OpKind::Add, {xs, y});
  const int32_t scaled = add_instr(p, InstrKind::Op, f64, OpKind::Mul, {sum, k});
  p.outputs = {scaled, xs};
  for (double special : {kNaN, kInf, -kInf}) {
    const int32_t r = add_instr(p, InstrKind::Constant, f64, OpKind::kCount, {}, 0, special);
    p.outputs.push_back(add_instr(p, InstrKind::Op, f64, OpKind::Identity, {r}));
  }
  return p;
}

TEST_F(CodegenTest, GeneratedSourceHoistsScalarsAndVectorizesTheLoop) {
  const KernelProgram program = sample_program(0.1);
  const std::string source = lt::backend::cpu::generate_source({&program}, {"lt_test_kernel"});
  for (const char* expected :
       {"namespace lt_kernel", "extern \"C\" void lt_test_kernel(", "#pragma GCC ivdep",
        "lt_kernel::MulFn{}(r0, r2)", "lt_kernel::AddFn{}(r4, r1)", "lt_kernel::MulFn{}(r5, r3)",
        "static_cast<double>(s[0])", "__builtin_nan(\"\")", "-__builtin_inf()"}) {
    EXPECT_NE(source.find(expected), std::string::npos) << "missing: " << expected;
  }
  // Scalars and constants are loop-invariant: loaded once, before the loop.
  EXPECT_LT(source.find("s[0]"), source.find("#pragma GCC ivdep"));
  EXPECT_LT(source.find("__builtin_nan"), source.find("#pragma GCC ivdep"));
}

// Runs a compiled sample_program over n elements, the first output in place over x.
void expect_sample_kernel_works(const lt::backend::cpu::CompiledKernel& kernel, double c) {
  constexpr int64_t n = 37;
  std::vector<double> x(n), y(n), xs(n), nan(n), inf(n), ninf(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.25 * static_cast<double>(i) - 3;
    y[i] = 1.0 / static_cast<double>(i + 1);
  }
  const std::vector<double> x0 = x;
  const double s = -1.75;
  const void* inputs[] = {x.data(), y.data()};
  void* outputs[] = {x.data(), xs.data(), nan.data(), inf.data(), ninf.data()};
  kernel.run(inputs, outputs, &s, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(x[i], (x0[i] * s + y[i]) * c, 1e-14) << i;
    EXPECT_EQ(xs[i], x0[i] * s) << i;
    EXPECT_TRUE(std::isnan(nan[i])) << i;
    EXPECT_EQ(inf[i], kInf) << i;
    EXPECT_EQ(ninf[i], -kInf) << i;
  }
}

TEST_F(CodegenTest, CompiledSourceRunsInPlace) {
  const double c = 1.25;
  const KernelProgram program = sample_program(c);
  const auto kernels = lt::backend::cpu::compile_native({&program}, native_options());
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_STREQ(kernels[0]->method(), "native");
  expect_sample_kernel_works(*kernels[0], c);
}

// codes (u8 input) -> f32 -> the unsigned map's value (out0), and the signed map's value of
// the code computed in the kernel from an f32 input (out1), which is not stored codes.
KernelProgram stored_codes_program() {
  using lt::ir::OpKind;
  KernelProgram p;
  const int32_t codes = add_instr(p, InstrKind::Input, DType::u8, OpKind::kCount, {}, 0);
  const int32_t x = add_instr(p, InstrKind::Input, DType::f32, OpKind::kCount, {}, 1);
  const int32_t wide = add_instr(p, InstrKind::Op, DType::f32, OpKind::Cast, {codes});
  const int32_t value =
      add_instr(p, InstrKind::Op, DType::f32, OpKind::DequantizeUnsigned8, {wide});
  const int32_t code = add_instr(p, InstrKind::Op, DType::f32, OpKind::QuantizeSigned8, {x});
  const int32_t signed_value =
      add_instr(p, InstrKind::Op, DType::f32, OpKind::DequantizeSigned8, {code});
  p.outputs = {value, signed_value};
  return p;
}

// Stored codes are decoded a block at a time where the CPU can and the engine asks for it
// (kernel_prelude.h), else looked up in the loop; either way every value is the map's, bit for
// bit, at any offset, count and alignment of the arrays.
TEST_F(CodegenTest, StoredCodesAreDecodedABlockAtATime) {
  const KernelProgram program = stored_codes_program();
  const std::string source = lt::backend::cpu::generate_source({&program}, {"lt_codes_kernel"});
  EXPECT_NE(source.find("lt_kernel::lt_decode_dynamic8<true>(d3, in0 + block"), std::string::npos);
  EXPECT_NE(source.find("const float r3 = d3[i - block];"), std::string::npos);
  // The code computed in the kernel is looked up where it is.
  EXPECT_EQ(source.find("lt_decode_dynamic8<false>"), std::string::npos);
  EXPECT_NE(source.find("lt_kernel::DequantizeSigned8Fn{}(r4)"), std::string::npos);

  // Runs a kernel of the program over codes at several offsets, counts and alignments.
  const auto check = [&](const lt::backend::cpu::CompiledKernel& kernel) {
    ASSERT_STREQ(kernel.method(), "native");
    std::vector<uint8_t> codes(1100);
    std::vector<float> x(codes.size());
    for (size_t i = 0; i < codes.size(); ++i) {
      codes[i] = static_cast<uint8_t>(i < 256 ? i : scalar(0, 256));
      x[i] = static_cast<float>(scalar(-1, 1));
    }
    const auto& unsigned_values = lt_kernel::kLtUnsignedLevels.values;
    const auto& signed_values = lt_kernel::kLtSignedLevels.values;
    // Whole blocks of 128 and 64, partial ones, and arrays that start off any alignment.
    for (const auto& [offset, n] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 1100}, {0, 128}, {3, 64}, {1, 1}, {5, 200}, {7, 1093}}) {
      SCOPED_TRACE(std::to_string(offset) + " + " + std::to_string(n));
      std::vector<float> value(static_cast<size_t>(n) + 1, -7.0f), signed_value(value);
      const void* inputs[] = {codes.data() + offset, x.data() + offset};
      void* outputs[] = {value.data(), signed_value.data()};
      kernel.run(inputs, outputs, nullptr, offset, n);
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(offset + i);
        bad += value[i] != unsigned_values[codes[k]];
        bad += signed_value[i] !=
               signed_values[static_cast<int>(lt_kernel::lt_dynamic8_code<false>(x[k]))];
      }
      EXPECT_EQ(bad, 0u);
      EXPECT_EQ(value[n], -7.0f) << "written past the count";
    }
  };
  for (const bool by_permutes : {false, true}) {
    SCOPED_TRACE(by_permutes ? "decoded by permutes" : "looked up in the loop");
    lt::backend::KernelSettings options = native_options();
    options.decode_codes_by_permutes = by_permutes;
    check(*lt::backend::cpu::compile_native({&program}, options).at(0));
  }
}

// Software prefetches are the CPU's choice (KernelSettings::software_prefetch): a compile of
// its own, with or without them, and the same bits either way, whole blocks of 128 elements,
// partial ones and offsets, the lines asked for past the end of the arrays included.
TEST_F(CodegenTest, SoftwarePrefetchesAreACompileOfTheirOwnAndChangeNoValue) {
  using lt::ir::OpKind;
  KernelProgram program;
  const int32_t x = add_instr(program, InstrKind::Input, DType::f32, OpKind::kCount, {}, 0);
  const int32_t y = add_instr(program, InstrKind::Input, DType::bf16, OpKind::kCount, {}, 1);
  const int32_t s = add_instr(program, InstrKind::Scalar, DType::f32, OpKind::kCount, {}, 0);
  const int32_t wide = add_instr(program, InstrKind::Op, DType::f32, OpKind::Cast, {y});
  const int32_t product = add_instr(program, InstrKind::Op, DType::f32, OpKind::Mul, {x, s});
  program.outputs = {add_instr(program, InstrKind::Op, DType::f32, OpKind::Add, {product, wide})};
  const std::string source = lt::backend::cpu::generate_source({&program}, {"lt_prefetch_kernel"});
  EXPECT_NE(source.find("#if defined(LT_SOFTWARE_PREFETCH)"), std::string::npos);
  EXPECT_NE(source.find("lt_kernel::lt_prefetch_block(in1, block + lt_kernel::kPrefetchAhead)"),
            std::string::npos);

  const TempDir cache;
  lt::backend::KernelSettings options = native_options();
  options.cache_dir = cache.path().string();
  std::vector<std::shared_ptr<lt::backend::cpu::CompiledKernel>> kernels;
  for (const bool prefetch : {false, true}) {
    options.software_prefetch = prefetch;
    kernels.push_back(lt::backend::cpu::compile_native({&program}, options).at(0));
    ASSERT_STREQ(kernels.back()->method(), "native");
  }
  size_t objects = 0;
  for (const auto& entry : fs::directory_iterator(cache.path())) {
    objects += entry.path().extension() == ".so";
  }
  EXPECT_EQ(objects, 2u) << "one shared object for each choice";

  std::vector<float> a(3000);
  std::vector<uint16_t> b(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(scalar(-4, 4));
    b[i] = lt_kernel::lt_bf16_store(static_cast<float>(scalar(-4, 4)));
  }
  const double scale[] = {0.75};
  for (const auto& [offset, n] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 3000}, {0, 128}, {1, 127}, {5, 129}, {7, 2993}, {2999, 1}}) {
    SCOPED_TRACE(std::to_string(offset) + " + " + std::to_string(n));
    std::vector<std::vector<float>> results;
    for (const auto& kernel : kernels) {
      std::vector<float> out(static_cast<size_t>(n) + 1, -7.0f);
      const void* inputs[] = {a.data() + offset, b.data() + offset};
      void* outputs[] = {out.data()};
      kernel->run(inputs, outputs, scale, offset, n);
      EXPECT_EQ(out[n], -7.0f) << "written past the count";
      results.push_back(std::move(out));
    }
    size_t different = 0;
    std::vector<double> got, want;
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<size_t>(offset + i);
      different += std::memcmp(&results[0][i], &results[1][i], sizeof(float)) != 0;
      got.push_back(results[1][i]);
      want.push_back(static_cast<double>(a[k]) * 0.75 + lt_kernel::lt_bf16_load(b[k]));
    }
    EXPECT_EQ(different, 0u);
    expect_same(got, want, kF32);
  }
}

// Codes stored as u8 straight from the integer code, the same bytes as the cast of its f32
// value: at every midpoint of both maps and the floats either side, zeros, negatives, values
// past 1, denormals, infinities and NaN.
TEST_F(CodegenTest, QuantizedCodesStoreAsTheCastOfTheirValue) {
  using lt::ir::OpKind;
  KernelProgram program;
  const int32_t x = add_instr(program, InstrKind::Input, DType::f32, OpKind::kCount, {}, 0);
  const int32_t s = add_instr(program, InstrKind::Op, DType::f32, OpKind::QuantizeSigned8, {x});
  const int32_t u = add_instr(program, InstrKind::Op, DType::f32, OpKind::QuantizeUnsigned8, {x});
  program.outputs = {add_instr(program, InstrKind::Op, DType::u8, OpKind::Cast, {s}),
                     add_instr(program, InstrKind::Op, DType::u8, OpKind::Cast, {u})};
  const std::string source = lt::backend::cpu::generate_source({&program}, {"lt_codes_kernel"});
  EXPECT_NE(source.find("lt_kernel::lt_quantize_signed8_u8(r0)"), std::string::npos);
  EXPECT_NE(source.find("lt_kernel::lt_quantize_unsigned8_u8(r0)"), std::string::npos);

  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -1.0f,
                               2.5f,
                               -7.0f,
                               1e-40f,
                               -1e-40f,
                               1e-30f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  for (const auto* levels : {&lt_kernel::kLtSignedLevels, &lt_kernel::kLtUnsignedLevels}) {
    for (int c = 0; c + 1 < 256; ++c) {
      const float midpoint =
          static_cast<float>((static_cast<double>(levels->values[c]) + levels->values[c + 1]) / 2);
      for (float v : {midpoint, std::nextafter(midpoint, -2.0f), std::nextafter(midpoint, 2.0f)}) {
        values.push_back(v);
      }
    }
  }
  for (int i = 0; i < 1000; ++i) values.push_back(static_cast<float>(scalar(-1.2, 1.2)));
  const auto kernels = lt::backend::cpu::compile_native({&program}, native_options());
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_STREQ(kernels[0]->method(), "native");
  std::vector<uint8_t> signed_codes(values.size()), unsigned_codes(values.size());
  const void* inputs[] = {values.data()};
  void* outputs[] = {signed_codes.data(), unsigned_codes.data()};
  kernels[0]->run(inputs, outputs, nullptr, 0, static_cast<int64_t>(values.size()));
  size_t bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    bad += signed_codes[i] != lt_kernel::lt_cast_u8(lt_kernel::lt_dynamic8_code<false>(values[i]));
    bad += unsigned_codes[i] != lt_kernel::lt_cast_u8(lt_kernel::lt_dynamic8_code<true>(values[i]));
  }
  EXPECT_EQ(bad, 0u);
}

// Through the engine: the optimizer's pattern (codes stored by one step, read by the next),
// over every code, a launch's second work unit and its partial last block, and a transposed
// view whose codes are gathered into tiles first.
TEST_F(CodegenTest, StoredCodesMatchTheReference) {
  // Casts truncate: codes 0..255.
  const Tensor codes = uniform(Shape{70001}, 0, 256, DType::f32).to(DType::u8);
  const Tensor grid = uniform(Shape{37, 41}, 0, 256, DType::f32).to(DType::u8);
  settle();
  constexpr Tol exact{0, 0};
  check_outputs({
      {"signed", lt::trace::dequantize8(codes, false), exact},
      {"unsigned", lt::trace::dequantize8(codes, true), exact},
      {"gathered", lt::trace::dequantize8(grid.t(), true), exact},
  });
}

// The disk cache: a compile stores one shared object and leaves nothing else behind; the same
// source again is loaded from disk; another directory starts cold.
TEST_F(CodegenTest, DiskCacheServesTheSameSourceAgain) {
  const Restore restore([dir = lt::kernel_cache_dir()] { lt::set_kernel_cache_dir(dir); });
  const TempDir first;
  const TempDir second;
  const double c = 1.25;
  const KernelProgram program = sample_program(c);

  lt::set_kernel_cache_dir(first.path().string());
  int64_t compiles = counter("KernelCompile");
  int64_t hits = counter("KernelDiskCacheHit");
  expect_sample_kernel_works(*lt::backend::cpu::compile_native({&program}, native_options()).at(0),
                             c);
  EXPECT_EQ(counter("KernelCompile") - compiles, 1);
  EXPECT_EQ(counter("KernelDiskCacheHit") - hits, 0);
  const std::set<std::string> files = first.files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(fs::path(*files.begin()).extension(), ".so");

  expect_sample_kernel_works(*lt::backend::cpu::compile_native({&program}, native_options()).at(0),
                             c);
  EXPECT_EQ(counter("KernelCompile") - compiles, 1);
  EXPECT_EQ(counter("KernelDiskCacheHit") - hits, 1);
  EXPECT_EQ(first.files(), files);

  lt::set_kernel_cache_dir(second.path().string());
  expect_sample_kernel_works(*lt::backend::cpu::compile_native({&program}, native_options()).at(0),
                             c);
  EXPECT_EQ(counter("KernelCompile") - compiles, 2);
  EXPECT_EQ(second.files(), files);
}

// The engine compiles into the directory set at run time.
TEST_F(CodegenTest, KernelCacheDirSetAtRunTimeIsUsed) {
  const Restore restore([dir = lt::kernel_cache_dir(), policy = lt::scalar_policy()] {
    lt::set_kernel_cache_dir(dir);
    lt::set_scalar_policy(policy);
  });
  const TempDir dir;
  lt::set_kernel_cache_dir(dir.path().string());
  lt::set_scalar_policy(lt::ScalarPolicy::constant);
  const int64_t compiles = counter("KernelCompile");
  const Tensor a = uniform({5001}, -1, 1, DType::f32);
  const Tensor y = a * 1.25;
  const std::vector<double> want = lt::reference::evaluate(y);
  lt::mark_step();
  expect_same(y.to_vector<double>(), want, kF32);
  EXPECT_EQ(counter("KernelCompile") - compiles, 1);
  EXPECT_EQ(dir.files().size(), 1u);
}

// A disk cache bound below one kernel's size still lets the kernel just compiled load.
TEST_F(CodegenTest, TinyDiskCacheStillLoadsTheNewKernel) {
  const Restore restore([dir = lt::kernel_cache_dir(),
                         bytes = lt::runtime::config().kernel_cache_bytes.load(),
                         policy = lt::scalar_policy()] {
    lt::set_kernel_cache_dir(dir);
    lt::set_kernel_cache_bytes(bytes);
    lt::set_scalar_policy(policy);
  });
  const TempDir dir;
  lt::set_kernel_cache_dir(dir.path().string());
  lt::set_kernel_cache_bytes(1);
  lt::set_scalar_policy(lt::ScalarPolicy::constant);
  const int64_t compiles = counter("KernelCompile");
  const Tensor a = uniform({5001}, -1, 1, DType::f32);
  const Tensor y = a * 1.25;
  const std::vector<double> want = lt::reference::evaluate(y);
  lt::mark_step();
  expect_same(y.to_vector<double>(), want, kF32);
  EXPECT_EQ(counter("KernelCompile") - compiles, 1);
}

// Choosing the native compiler applies to graphs compiled before the switch as well.
TEST_F(CodegenTest, SwitchingToNativeAppliesToCachedGraphs) {
  const lt_test::PolicyScope policy(lt::ScalarPolicy::constant);
  const double c = 1.25;
  Tensor p = uniform({5001}, -1, 1, DType::f32);
  std::vector<double> want = p.to_vector<double>();
  settle();

  lt::set_kernel_compiler("interpreter");
  p.mul_(c);
  lt::mark_step();
  lt::set_kernel_compiler("native");
  const int64_t kernels = native_kernels();
  p.mul_(c);
  lt::mark_step();
  for (double& v : want) v = static_cast<float>(static_cast<float>(v * c) * c);
  expect_same(p.to_vector<double>(), want, kF32);
  EXPECT_EQ(native_kernels() - kernels, 1) << "the step ran the interpreter's kernel";
}

// The f32 exp, log, tanh, erf and GELU derivative that kernels and the interpreter share, against
// double precision on a dense grid over every range they branch on, and at fresh random points: the
// error bounds their comments state. (Tests build without -march=native, so fmaf is libm's,
// correctly rounded, the bits the kernels' instruction gives.)
TEST(KernelMathTest, ExpLogTanhErfAndGeluDerivativeKeepTheirErrorBounds) {
  std::vector<float> points;
  for (float v = -12.0f; v <= 12.0f; v += 1.0f / 4096) points.push_back(v);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> wide(-90.0f, 88.0f);
  for (int i = 0; i < 100000; ++i) points.push_back(wide(rng));
  double exp_rel = 0, log_rel = 0, tanh_rel = 0, erf_abs = 0, gelu_abs = 0;
  auto relative_error = [](float got, double exact) {
    return std::abs(got - exact) / std::abs(exact);
  };
  std::uniform_real_distribution<float> exponent(-149.0f, 128.0f);
  for (int i = 0; i < 100000; ++i) {  // log over the positive floats, subnormals included
    const float x = std::exp2(exponent(rng));
    if (x == 1.0f || !std::isfinite(x) || x == 0.0f) continue;
    log_rel = std::max(log_rel, relative_error(lt_kernel::lt_log(x), std::log(double{x})));
  }
  for (float x = 0.5f; x < 2.0f; x += 1.0f / 65536) {  // near 1, where log's result is small
    if (x == 1.0f) continue;
    log_rel = std::max(log_rel, relative_error(lt_kernel::lt_log(x), std::log(double{x})));
  }
  for (const float x : points) {
    if (x != 0.0f) {
      tanh_rel = std::max(tanh_rel, relative_error(lt_kernel::lt_tanh(x), std::tanh(double{x})));
    }
    const double exact_exp = std::exp(static_cast<double>(x));
    if (exact_exp > 1e-37) {  // normal results: the subnormals lose relative precision anyway
      exp_rel = std::max(exp_rel, relative_error(lt_kernel::lt_exp(x), exact_exp));
    }
    erf_abs = std::max(erf_abs, std::abs(lt_kernel::lt_erf(x) - std::erf(static_cast<double>(x))));
    gelu_abs = std::max(gelu_abs, std::abs(lt_kernel::lt_gelu_derivative(x) -
                                           lt_kernel::lt_gelu_derivative(static_cast<double>(x))));
  }
  EXPECT_LT(exp_rel, 1.5 * 0x1p-23) << "exp: within 1.5 ulp";
  // The largest errors over every float (of [-12, 12] for exp and erf, of [2^-20, 12] for tanh,
  // every positive one for log): exp 0.71 x 2^-23, log 0.83 ulp, tanh 1.19 x 2^-23, erf
  // 7.4e-8 (1.24 ulp), GELU's derivative 1.45e-7.
  EXPECT_LT(log_rel, 1.5 * 0x1p-23) << "log";
  EXPECT_LT(tanh_rel, 1.5 * 0x1p-23) << "tanh";
  EXPECT_LT(erf_abs, 1e-7) << "erf";
  EXPECT_LT(gelu_abs, 2e-7) << "GELU's derivative";
  EXPECT_TRUE(std::isnan(lt_kernel::lt_gelu_derivative(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(lt_kernel::lt_exp(-200.0f), 0.0f);
  EXPECT_EQ(lt_kernel::lt_log(1.0f), 0.0f);
  EXPECT_EQ(lt_kernel::lt_log(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(lt_kernel::lt_log(-0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(lt_kernel::lt_log(std::numeric_limits<float>::infinity()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(lt_kernel::lt_log(-1e-30f)));
  EXPECT_TRUE(std::isnan(lt_kernel::lt_log(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(lt_kernel::lt_tanh(-0.0f)));
  EXPECT_EQ(lt_kernel::lt_tanh(1e-30f), 1e-30f);
  EXPECT_EQ(lt_kernel::lt_tanh(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_EQ(lt_kernel::lt_tanh(95.0f), 1.0f);
  EXPECT_TRUE(std::isnan(lt_kernel::lt_tanh(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(lt_kernel::lt_gelu_derivative(-20.0f), 0.0f);
  EXPECT_EQ(lt_kernel::lt_gelu_derivative(20.0f), 1.0f);
}

// pow's exponents 2 and 1 skip libm: the exact square (correctly rounded, as libm's powf is not
// always) and x itself, special values included.
TEST(KernelMathTest, PowSquaresAndFirstPowersExactly) {
  for (const float x : {-0.0f, 3.0f, -1.5e20f, 0.1f, -std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(lt_kernel::lt_pow(x, 2.0f), x * x);  // +inf for -1.5e20
    EXPECT_EQ(lt_kernel::lt_pow(x, 1.0f), x);
    EXPECT_EQ(std::signbit(lt_kernel::lt_pow(x, 1.0f)), std::signbit(x));
  }
  EXPECT_TRUE(std::isnan(lt_kernel::lt_pow(std::numeric_limits<float>::quiet_NaN(), 2.0f)));
  EXPECT_FLOAT_EQ(lt_kernel::lt_pow(2.0f, 2.5f), std::pow(2.0f, 2.5f));
}

}  // namespace
