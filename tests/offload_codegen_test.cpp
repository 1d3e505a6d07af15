// The OpenCL and CUDA dialects of the kernel renderer, run through their devices' runtimes:
// every elementwise op of the op table in every dtype it has a kernel for, every cast, positions
// and random draws, and a kernel with a multi-tensor update's hundreds of scalars, each rendered
// with its dialect's prelude, built once and run over inputs that include the special values,
// against the CPU's interpreter. The results must be the CPU's bits, except where each target
// calls its own math library (double-precision transcendentals, sin, cos, general powers).
// OpenCL runs on PoCL (skipped where no OpenCL device is installed, unless LT_REQUIRE_OPENCL=1;
// CI installs PoCL); CUDA runs on the fake driver, its source compiled for the host
// (fake_cuda.h): the rendering, the CPU prelude under the CUDA shim and the launch arguments,
// not NVRTC's code (cuda_codegen_test compiles that).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels/compiled_kernel.h"
#include "backend/cuda/cuda_device.h"
#include "backend/kernel_source.h"
#include "backend/offload/runtime.h"
#include "backend/opencl/opencl_api.h"
#include "fake_cuda.h"
#include "ir/dtype_traits.h"
#include "ir/op_semantics.h"
#include "kernel_programs.h"

namespace {

using lt::DType;
using lt::backend::KernelDialect;
using lt::backend::offload::Runtime;
using lt::compiler::Instr;
using lt::compiler::InstrKind;
using lt::compiler::KernelProgram;
using lt::ir::OpKind;
using lt::test::every_kernel;
using lt::test::ProgramBuilder;

constexpr int64_t kElements = 515;  // not a multiple of any work-group size

// The dialect's device: PoCL's (null where there is none), or the fake CUDA driver's.
std::shared_ptr<const Runtime> open_device(KernelDialect dialect) {
  std::string why;
  if (dialect == KernelDialect::cuda) {
    auto device = lt::backend::cuda::Device::open(fake_cuda::Gpu::get().driver(),
                                                  std::make_shared<fake_cuda::HostCompiler>(),
                                                  std::nullopt, 0, "", 0, &why);
    EXPECT_NE(device, nullptr) << why;
    return device;
  }
  std::shared_ptr<const Runtime> device = lt::backend::opencl::Device::open(&why);
  if (device == nullptr) {
    const char* required = std::getenv("LT_REQUIRE_OPENCL");
    if (required != nullptr && std::string(required) == "1") {
      ADD_FAILURE() << "LT_REQUIRE_OPENCL=1 and no OpenCL device: " << why;
    }
  }
  return device;
}

// Values that reach every branch of the helpers: special values, subnormals, whole numbers
// (floor division, powers), large and small magnitudes, then random ones.
std::vector<double> floating_values(std::mt19937& rng) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {std::nan(""), inf,   -inf,   0.0,   -0.0, 1e-40, -3e-39, 3e38,
                           -3e38,        2.0,   -2.0,   1.0,   -1.0, 0.5,   7.0,    -7.0,
                           0.1,          100.0, -110.5, 0.625, 0.84, 1e-8,  65504,  70000};
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> exponent(-12.0, 12.0);
  while (static_cast<int64_t>(v.size()) < kElements) {
    v.push_back(normal(rng) * std::exp2(std::round(exponent(rng))));
  }
  return v;
}

std::vector<double> integer_values(std::mt19937& rng, DType dtype) {
  std::vector<double> v;
  if (dtype == DType::boolean) {
    for (int64_t i = 0; i < kElements; ++i) v.push_back(static_cast<double>(rng() & 1));
    return v;
  }
  if (dtype == DType::u8) {
    for (int64_t i = 0; i < kElements; ++i) v.push_back(static_cast<double>(rng() & 255));
    return v;
  }
  v = {0, 1, -1, 2, -2, 7, -7, 3, -3, 2147483647.0, -2147483648.0};
  std::uniform_int_distribution<int> small(-50, 50);
  while (static_cast<int64_t>(v.size()) < kElements) v.push_back(small(rng));
  return v;
}

// `values` stored as dtype's elements.
std::vector<unsigned char> stored(const std::vector<double>& values, DType dtype) {
  const size_t size = lt::dtype_size(dtype);
  std::vector<unsigned char> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    unsigned char* at = bytes.data() + i * size;
    const double x = values[i];
    switch (dtype) {
      case DType::f32: {
        const float f = static_cast<float>(x);
        std::memcpy(at, &f, 4);
        break;
      }
      case DType::f64:
        std::memcpy(at, &x, 8);
        break;
      case DType::bf16: {
        const uint16_t h = lt_kernel::lt_bf16_store(static_cast<float>(x));
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::f16: {
        const uint16_t h = lt_kernel::lt_f16_store(static_cast<float>(x));
        std::memcpy(at, &h, 2);
        break;
      }
      case DType::i32: {
        const int32_t k = static_cast<int32_t>(x);
        std::memcpy(at, &k, 4);
        break;
      }
      case DType::i64: {
        const int64_t k = static_cast<int64_t>(x);
        std::memcpy(at, &k, 8);
        break;
      }
      case DType::boolean:
      case DType::u8:
        *at = static_cast<unsigned char>(x);
        break;
    }
  }
  return bytes;
}

double element(const std::vector<unsigned char>& bytes, DType dtype, size_t i) {
  const unsigned char* at = bytes.data() + i * lt::dtype_size(dtype);
  switch (dtype) {
    case DType::f32: {
      float f;
      std::memcpy(&f, at, 4);
      return f;
    }
    case DType::f64: {
      double d;
      std::memcpy(&d, at, 8);
      return d;
    }
    case DType::bf16:
    case DType::f16: {
      uint16_t h;
      std::memcpy(&h, at, 2);
      return dtype == DType::bf16 ? lt_kernel::lt_bf16_load(h) : lt_kernel::lt_f16_load(h);
    }
    case DType::i32: {
      int32_t k;
      std::memcpy(&k, at, 4);
      return k;
    }
    case DType::i64: {
      int64_t k;
      std::memcpy(&k, at, 8);
      return static_cast<double>(k);
    }
    default:
      return *at;
  }
}

bool uses(const KernelProgram& program, std::initializer_list<OpKind> ops) {
  for (const Instr& instr : program.instrs) {
    if (instr.kind != InstrKind::Op) continue;
    for (OpKind op : ops) {
      if (instr.op == op) return true;
    }
  }
  return false;
}

// Where each target calls its own math library, the results may differ in their last bits.
double tolerance(const KernelProgram& program, DType output) {
  const bool library_f32 = uses(program, {OpKind::Sin, OpKind::Cos, OpKind::Pow});
  const bool library_f64 =
      library_f32 || uses(program, {OpKind::Exp, OpKind::Log, OpKind::Tanh, OpKind::Sigmoid,
                                    OpKind::Erf, OpKind::Softplus, OpKind::GeluDerivative});
  const bool f64 = std::any_of(program.instrs.begin(), program.instrs.end(),
                               [](const Instr& i) { return i.dtype == DType::f64; }) &&
                   output == DType::f64;
  if (!(f64 ? library_f64 : library_f32)) return 0;
  switch (output) {
    case DType::f64:
      return 1e-14;
    case DType::f32:
      return 1e-6;
    default:
      return 1e-2;  // one ulp of a 16-bit float after the rounding
  }
}

struct Launch {
  std::vector<std::vector<unsigned char>> inputs;
  std::vector<double> scalars;
};

// A uniform draw's seed, offset and position are whole numbers below 2^53 (op_table.def) that
// the dtype holds.
std::vector<double> draw_counters(std::mt19937& rng, DType dtype) {
  const bool wide = lt::dtype_size(dtype) >= 4;
  std::uniform_int_distribution<int64_t> counter(0, wide ? int64_t{1} << 40 : 60000);
  std::vector<double> v = {0, 1, 255, 4096};
  if (wide) v.insert(v.end(), {4294967295.0, 4294967296.0});
  while (static_cast<int64_t>(v.size()) < kElements) v.push_back(static_cast<double>(counter(rng)));
  return v;
}

Launch make_inputs(const KernelProgram& program, std::mt19937& rng) {
  Launch run;
  const bool uniform = uses(program, {OpKind::Uniform});
  for (DType dtype : program.input_dtypes) {
    const bool floating = lt::dtype_info(dtype).floating;
    run.inputs.push_back(stored(!floating ? integer_values(rng, dtype)
                                : uniform ? draw_counters(rng, dtype)
                                          : floating_values(rng),
                                dtype));
  }
  run.scalars.assign(program.num_scalars, 0.0);
  const bool draws = uses(program, {OpKind::Uniform, OpKind::Bernoulli});
  for (const Instr& instr : program.instrs) {
    if (instr.kind != InstrKind::Scalar) continue;
    double value;
    if (draws) {
      value = instr.index == 0 ? 12345.0 : (instr.index == 1 ? 7.0 : 0.3);  // seed, offset, p
    } else if (lt::dtype_info(instr.dtype).floating) {
      value = instr.index % 2 == 0 ? 1.75 : 0.01;
    } else {
      value = instr.dtype == DType::boolean ? 1 : (instr.dtype == DType::u8 ? 7 : -3);
    }
    run.scalars[instr.index] = value;
  }
  return run;
}

std::vector<std::vector<unsigned char>> run_on_cpu(const KernelProgram& program,
                                                   const Launch& run) {
  std::vector<std::vector<unsigned char>> outputs;
  std::vector<const void*> in;
  std::vector<void*> out;
  for (const auto& input : run.inputs) in.push_back(input.data());
  for (int32_t r : program.outputs) {
    outputs.emplace_back(kElements * lt::dtype_size(program.instrs[r].dtype));
  }
  for (auto& output : outputs) out.push_back(output.data());
  lt::backend::cpu::make_interpreted_kernel(program)->run(in.data(), out.data(), run.scalars.data(),
                                                          0, kElements);
  return outputs;
}

std::vector<std::vector<unsigned char>> run_on_device(const Runtime& device, void* kernel,
                                                      const KernelProgram& program,
                                                      const Launch& run) {
  std::vector<std::shared_ptr<void>> buffers;
  int arg = 0;
  for (const auto& input : run.inputs) {
    buffers.push_back(device.allocate(input.size()));
    void* mem = buffers.back().get();
    device.write(mem, input.data(), input.size(), false);
    device.set_arg(kernel, arg++, sizeof mem, &mem);
  }
  std::vector<std::vector<unsigned char>> outputs;
  for (int32_t r : program.outputs) {
    outputs.emplace_back(kElements * lt::dtype_size(program.instrs[r].dtype));
    buffers.push_back(device.allocate(outputs.back().size()));
    void* mem = buffers.back().get();
    device.set_arg(kernel, arg++, sizeof mem, &mem);
  }
  std::shared_ptr<void> scalar_buffer;
  if (device.scalars_by_value(program)) {
    for (double s : run.scalars) device.set_arg(kernel, arg++, sizeof s, &s);
  } else {
    scalar_buffer = device.allocate(run.scalars.size() * sizeof(double));
    void* mem = scalar_buffer.get();
    device.write(mem, run.scalars.data(), run.scalars.size() * sizeof(double), false);
    device.set_arg(kernel, arg++, sizeof mem, &mem);
  }
  const int64_t start = 0, n = kElements;
  device.set_arg(kernel, arg++, sizeof start, &start);
  device.set_arg(kernel, arg++, sizeof n, &n);
  device.launch(kernel, 128, 64);  // fewer work-items than elements: the loop strides
  for (size_t k = 0; k < outputs.size(); ++k) {
    device.read(buffers[run.inputs.size() + k].get(), outputs[k].data(), outputs[k].size());
  }
  return outputs;
}

class OffloadCodegenTest : public ::testing::TestWithParam<KernelDialect> {};

TEST_P(OffloadCodegenTest, EveryKernelComputesTheCpusResults) {
  const std::shared_ptr<const Runtime> device = open_device(GetParam());
  if (device == nullptr) GTEST_SKIP() << "no OpenCL device";
  const auto describe = [&](const KernelProgram& program) {
    return lt::backend::render_kernel(program, "k", GetParam()).substr(0, 1200);
  };
  const std::vector<KernelProgram> programs = every_kernel();
  std::vector<const KernelProgram*> pointers;
  std::vector<std::string> symbols;
  for (size_t i = 0; i < programs.size(); ++i) {
    pointers.push_back(&programs[i]);
    std::string name = "k";  // appended: GCC 12 warns falsely on "k" + std::string
    name += std::to_string(i);
    symbols.push_back(name);
  }
  const auto program = device->build(pointers, symbols, "");
  std::mt19937 rng(std::random_device{}());
  int exact = 0;
  for (size_t p = 0; p < programs.size(); ++p) {
    SCOPED_TRACE(describe(programs[p]));
    const Launch run = make_inputs(programs[p], rng);
    const auto kernel = device->kernel(program, symbols[p]);
    const auto want = run_on_cpu(programs[p], run);
    const auto got = run_on_device(*device, kernel.get(), programs[p], run);
    for (size_t k = 0; k < want.size(); ++k) {
      const DType dtype = programs[p].instrs[programs[p].outputs[k]].dtype;
      const double tol = tolerance(programs[p], dtype);
      exact += tol == 0;
      int reported = 0;
      for (size_t i = 0; i < static_cast<size_t>(kElements) && reported < 5; ++i) {
        const double w = element(want[k], dtype, i), g = element(got[k], dtype, i);
        const size_t size = lt::dtype_size(dtype);
        const bool same_bits =
            std::memcmp(want[k].data() + i * size, got[k].data() + i * size, size) == 0;
        // A NaN is a NaN: which sign and payload arithmetic gives one is the hardware's and the
        // compiler's (the order of an add's operands), and 16-bit stores keep them.
        const bool both_nan = std::isnan(w) && std::isnan(g);
        const bool close =
            tol > 0 && (std::fabs(g - w) <= tol * std::max(1.0, std::fabs(w)) || w == g);
        if (!same_bits && !both_nan && !close) {
          ADD_FAILURE() << "output " << k << " element " << i << ": " << device->kind() << " " << g
                        << ", CPU " << w << " (input 0: "
                        << (run.inputs.empty()
                                ? 0.0
                                : element(run.inputs[0], programs[p].input_dtypes[0], i))
                        << ")";
          ++reported;
        }
      }
    }
  }
  // Most outputs are compared bit for bit.
  EXPECT_GT(exact, static_cast<int>(programs.size()) / 2);
}

INSTANTIATE_TEST_SUITE_P(Dialects, OffloadCodegenTest,
                         ::testing::Values(KernelDialect::opencl, KernelDialect::cuda),
                         [](const ::testing::TestParamInfo<KernelDialect>& info) {
                           return info.param == KernelDialect::cuda ? "cuda" : "opencl";
                         });

// Scalars are kernel arguments by value while they fit the 1024 bytes every device takes; a
// multi-tensor update's hundreds are one array read where each is used.
TEST(OpenClDialectTest, ScalarsAreArgumentsWhileTheyFit) {
  ProgramBuilder small;
  const int32_t x = small.input(DType::f32);
  const KernelProgram few =
      small.finish({small.op(OpKind::Mul, DType::f32, {x, small.scalar(DType::f32)})});
  const std::string by_value =
      lt::backend::render_kernel(few, "f", lt::backend::KernelDialect::opencl);
  EXPECT_NE(by_value.find("__kernel void f(__global const float* in0, __global float* out0, "
                          "double s0, long start, long n)"),
            std::string::npos)
      << by_value;
  EXPECT_LT(by_value.find("s0"), by_value.find("get_global_id")) << by_value;
  EXPECT_NE(by_value.find("lt_op_Mul(r0, r1)"), std::string::npos) << by_value;

  ProgramBuilder large;
  int32_t acc = large.input(DType::f32);
  for (int i = 0; i < 200; ++i) {
    acc = large.op(OpKind::Add, DType::f32, {acc, large.scalar(DType::f32)});
  }
  const KernelProgram many = large.finish({acc});
  EXPECT_FALSE(lt::backend::opencl_scalars_by_value(many));
  const std::string in_memory =
      lt::backend::render_kernel(many, "g", lt::backend::KernelDialect::opencl);
  EXPECT_NE(in_memory.find("__global const double* s, long start, long n)"), std::string::npos);
  EXPECT_GT(in_memory.find("s[199]"), in_memory.find("get_global_id")) << in_memory.substr(0, 800);
}

}  // namespace
