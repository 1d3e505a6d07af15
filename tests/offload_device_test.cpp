// The devices with their own memory, as ggml's test-backend-ops checks a backend: the same
// computations traced on `cpu` and on the device from the same values, their results compared.
// Elementwise kernels compute the CPU's bits (offload_codegen_test); folds, products and sums of
// rows add in another order, so those compare within a few f32 roundings. Also: values stay on the
// device between steps, scalars are kernel arguments there too, and a step that fails (an index
// out of range) commits nothing.
//
// Each test runs on `opencl` (PoCL on the CPU in CI; skipped where no OpenCL device is
// installed, unless LT_REQUIRE_OPENCL=1) and on `cuda` through a fake driver that runs the CUDA
// backend's generated kernels on the host (fake_cuda.h): the backend's host logic, its CUDA
// source and its routines, without a GPU. The fake also catches uploads that would wait for the
// device and staged memory changed or freed before its copy ran.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/offload/offload_backend.h"
#include "backend/offload/routines.h"
#include "backend/registry.h"
#include "fake_cuda.h"
#include "test_support.h"

namespace lt {
// Parameterized tests' names and messages print the device kind.
void PrintTo(DeviceType type, std::ostream* out) {
  *out << device_type_name(type);
}
}  // namespace lt

namespace {

using lt::Device;
using lt::DeviceType;
using lt::Tensor;

const Device kCpu{DeviceType::cpu, 0};

// cuda:0 served by the CUDA backend over the fake driver, for the rest of the process.
void use_the_fake_cuda_driver() {
  static const bool registered = [] {
    namespace backend = lt::backend;
    backend::register_backend(
        DeviceType::cuda, [](int index, const backend::BackendSettings& settings) {
          std::string why;
          auto device = backend::cuda::Device::open(
              fake_cuda::Gpu::get().driver(), std::make_shared<fake_cuda::HostCompiler>(),
              fake_cuda::Gpu::get().blas(), index, settings.kernels.cache_dir,
              settings.kernels.cache_bytes, &why);
          if (device == nullptr) throw lt::Error("cuda:" + std::to_string(index) + ": " + why);
          return backend::offload::make_backend(std::move(device), index, settings);
        });
    backend::register_device_probe(DeviceType::cuda, [] {
      return backend::Availability{true, "a fake GPU whose kernels run on the host"};
    });
    return true;
  }();
  (void)registered;
}

class OffloadDeviceTest : public lt_test::EngineTest,
                          public ::testing::WithParamInterface<DeviceType> {
 protected:
  void SetUp() override {
    lt_test::EngineTest::SetUp();
    if (GetParam() == DeviceType::cuda) use_the_fake_cuda_driver();
    for (const lt::DeviceKind& kind : lt::device_kinds()) {
      if (kind.name != "opencl" || kind.available || GetParam() != DeviceType::opencl) continue;
      const char* required = std::getenv("LT_REQUIRE_OPENCL");
      if (required != nullptr && std::string(required) == "1") {
        FAIL() << "LT_REQUIRE_OPENCL=1 and opencl is unavailable: " << kind.reason;
      }
      GTEST_SKIP() << kind.reason;
    }
    device_ = Device{GetParam(), 0};
  }
  void TearDown() override {
    if (GetParam() == DeviceType::cuda) {
      EXPECT_EQ(fake_cuda::Gpu::get().faults(), std::vector<std::string>());
    }
    lt_test::EngineTest::TearDown();
  }

  Device device_;

  // `compute` traced on each device, its results read back.
  std::vector<std::vector<double>> on(const Device& device,
                                      const std::function<std::vector<Tensor>()>& compute) {
    const lt::DeviceGuard guard(device);
    std::vector<std::vector<double>> out;
    for (const Tensor& t : compute()) {
      EXPECT_EQ(t.device(), device);
      out.push_back(t.to(lt::DType::f64).to_vector<double>());
    }
    return out;
  }

  // The same results on both devices: equal, or within `rtol` of the CPU's (relative to the
  // larger of the value and 1).
  void expect_same(const std::function<std::vector<Tensor>()>& compute, double rtol) {
    const auto cpu = on(kCpu, compute);
    const auto opencl = on(device_, compute);
    ASSERT_EQ(cpu.size(), opencl.size());
    for (size_t t = 0; t < cpu.size(); ++t) {
      ASSERT_EQ(cpu[t].size(), opencl[t].size()) << "result " << t;
      int reported = 0;
      for (size_t i = 0; i < cpu[t].size() && reported < 5; ++i) {
        const double want = cpu[t][i], got = opencl[t][i];
        const bool same = want == got || (std::isnan(want) && std::isnan(got)) ||
                          std::fabs(got - want) <= rtol * std::max(1.0, std::fabs(want));
        if (!same) {
          ADD_FAILURE() << "result " << t << " element " << i << ": " << device_.str() << " " << got
                        << ", cpu " << want;
          ++reported;
        }
      }
    }
  }

  Tensor tensor(const std::vector<float>& v, const lt::Shape& shape) {
    return lt::from_vector(v, shape);
  }
};

TEST_P(OffloadDeviceTest, TensorsLiveOnTheDeviceAndComeBack) {
  const std::vector<float> v = values(1000);
  const lt::DeviceGuard guard(device_);
  Tensor x = lt::from_vector(v, {10, 100});
  EXPECT_EQ(x.device().str(), device_.str());
  EXPECT_EQ(x.to_vector<float>(), v);
  x.mul_(2.0).add_(1.0);
  lt::mark_step();
  const std::vector<float> got = x.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], v[i] * 2.0f + 1.0f) << i;
}

TEST_P(OffloadDeviceTest, ElementwiseOpsThroughViewsAndBroadcasts) {
  const std::vector<float> a = values(6 * 8), b = values(8), c = values(8 * 6);
  expect_same(
      [&] {
        const Tensor x = tensor(a, {6, 8}), y = tensor(b, {8}), z = tensor(c, {8, 6});
        const Tensor w = x.mul(y).add(z.t()).tanh();
        const Tensor s = x.slice(1, 2, 7, 2).exp().sub(y.slice(0, 1, 4));
        const Tensor m = lt::where(x.gt(y), x, z.t().mul(3.5));
        return std::vector<Tensor>{w, s, m, x.to(lt::DType::bf16).mul(y.to(lt::DType::bf16))};
      },
      0);
}

// Integers wrap on overflow on both devices, also inside a fused kernel whose compiler could
// otherwise assume that x + 1 > x.
TEST_P(OffloadDeviceTest, IntegerArithmeticWrapsAsOnTheCpu) {
  const std::vector<int64_t> big = {INT64_MAX, -5, 7, INT64_MIN, 3};
  expect_same(
      [&] {
        const Tensor x = lt::from_vector(big, {5});
        const Tensor y =
            lt::from_vector(std::vector<int64_t>{2147483647, -2147483647 - 1, 9, 0, -1}, {5})
                .to(lt::DType::i32);
        return std::vector<Tensor>{x.add(1).gt(x), x.mul(3).sub(x), y.add(1).gt(y), y.neg().mul(2)};
      },
      0);
}

TEST_P(OffloadDeviceTest, ReductionsOverEveryDim) {
  const std::vector<float> a = values(4 * 5 * 70, -3, 3);
  expect_same(
      [&] {
        const Tensor x = tensor(a, {4, 5, 70});
        return std::vector<Tensor>{
            x.sum(),           x.sum({2}),           x.sum({0}, true),
            x.mean({0, 2}),    x.max({1}),           x.norm({2}),
            x.argmax(2),       x.argmax(0),          x.transpose(0, 2).sum({1}),
            lt::softmax(x, 2), lt::log_softmax(x, 0)};
      },
      1e-6);
}

TEST_P(OffloadDeviceTest, MatrixProductsBatchedBroadcastAndTransposed) {
  const std::vector<float> a = values(3 * 5 * 7), b = values(7 * 4), c = values(2 * 3 * 4 * 7);
  expect_same(
      [&] {
        const Tensor x = tensor(a, {3, 5, 7}), w = tensor(b, {7, 4});
        const Tensor y = tensor(c, {2, 3, 4, 7});
        return std::vector<Tensor>{lt::matmul(x, w), lt::matmul(y, x.transpose(1, 2)),
                                   lt::matmul(w.t(), x.transpose(1, 2)),
                                   lt::matmul(x.to(lt::DType::bf16), w.to(lt::DType::bf16))};
      },
      1e-5);
}

TEST_P(OffloadDeviceTest, GathersSortsScansAndConcatenations) {
  const std::vector<float> table = values(10 * 6), keys = values(4 * 9);
  const std::vector<int64_t> ids = {3, 0, 9, 3, 7};
  expect_same(
      [&] {
        const Tensor t = tensor(table, {10, 6}), k = tensor(keys, {4, 9});
        const Tensor idx = lt::from_vector(ids, {5});
        const lt::ValuesIndices top = lt::topk(k, 3, 1);
        const lt::ValuesIndices sorted = lt::sort(k.t(), 0, true);
        return std::vector<Tensor>{lt::embedding(idx, t),
                                   lt::cat({t, t.slice(0, 2, 5)}, 0),
                                   lt::cat({k, k.mul(2.0)}, 1),
                                   top.values,
                                   top.indices,
                                   sorted.values,
                                   sorted.indices,
                                   lt::cumsum(k, 1),
                                   lt::argsort(k, 0)};
      },
      1e-6);
}

// Forward, backward and AdamW over a small network: the losses and the trained weights of the
// two devices agree, and after its first steps the device compiles nothing and uploads nothing
// synchronously.
TEST_P(OffloadDeviceTest, TrainingStepsMatchTheCpu) {
  const std::vector<float> w1 = values(16 * 12), w2 = values(12 * 5), x0 = values(8 * 16);
  const std::vector<int64_t> targets = {0, 4, 2, 1, 3, 3, 0, 2};
  const std::vector<int64_t> token_ids = {1, 5, 2, 2, 7, 0, 3, 6};
  const std::vector<float> table = values(8 * 16);
  const auto train = [&](const Device& device) {
    const lt::DeviceGuard guard(device);
    Tensor a = lt::from_vector(w1, {16, 12}).requires_grad_();
    Tensor b = lt::from_vector(w2, {12, 5}).requires_grad_();
    Tensor e = lt::from_vector(table, {8, 16}).requires_grad_();
    lt::optim::AdamWOptions options;
    options.lr = 0.05;
    lt::optim::AdamW optimizer({a, b, e}, options);
    const Tensor x = lt::from_vector(x0, {8, 16});
    const Tensor y = lt::from_vector(targets, {8});
    const Tensor ids = lt::from_vector(token_ids, {8});
    std::vector<double> losses;
    for (int step = 0; step < 6; ++step) {
      if (step == 3) lt::metrics::reset();
      const Tensor h = lt::gelu(lt::matmul(x.add(lt::embedding(ids, e)), a));
      const Tensor loss = lt::cross_entropy(lt::matmul(lt::layer_norm(h, {12}), b), y);
      loss.backward();
      optimizer.step();
      optimizer.zero_grad();
      lt::mark_step();
      losses.push_back(loss.to_vector<double>()[0]);
    }
    if (device == device_) {
      EXPECT_EQ(lt::metrics::counter_value("UncachedCompile"), 0);
      EXPECT_EQ(lt::metrics::counter_value("TransferToDeviceSync"), 0);
    }
    losses.push_back(a.sum().to_vector<double>()[0]);
    losses.push_back(e.sum().to_vector<double>()[0]);
    return losses;
  };
  const std::vector<double> cpu = train(kCpu), opencl = train(device_);
  ASSERT_EQ(cpu.size(), opencl.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(opencl[i], cpu[i], 1e-4 * std::max(1.0, std::fabs(cpu[i]))) << i;
  }
  EXPECT_LT(cpu[5], cpu[0]);  // it trains
}

// An id computed on the device (the host checks those it uploads while tracing) that is out of
// range fails the step where it is used, naming the op, and commits nothing: the table it would
// have updated keeps its values, and the next step runs.
TEST_P(OffloadDeviceTest, AnIndexOutOfRangeFailsTheStepAndCommitsNothing) {
  const std::vector<float> table = values(5 * 3);
  const lt::DeviceGuard guard(device_);
  Tensor t = lt::from_vector(table, {5, 3});
  const Tensor bad = lt::from_vector(std::vector<int64_t>{1, 3, 2}, {3}).mul(3);  // 3, 9, 6
  const Tensor total = lt::embedding(bad, t).sum();
  t.add_(total);
  lt::mark_step();
  // Reading a value of the step raises why it failed (as a training loop's read of its loss).
  const std::string message = lt_test::error_message([&] { total.to_vector<float>(); });
  lt_test::expect_mentions(message, {"index_select", "index 9", "position 1", "size 5"});
  EXPECT_EQ(t.to_vector<float>(), table);
  t.mul_(2.0);
  lt::mark_step();
  const std::vector<float> doubled = t.to_vector<float>();
  for (size_t i = 0; i < table.size(); ++i) EXPECT_EQ(doubled[i], table[i] * 2.0f);
}

// A new value of a Python-number-like scalar changes a kernel argument, not the program.
TEST_P(OffloadDeviceTest, ScalarsAreKernelArgumentsOnTheDevice) {
  const lt::DeviceGuard guard(device_);
  Tensor x = lt::from_vector(values(100), {100});
  for (int step = 0; step < 4; ++step) {
    x.mul_(0.9 + 0.01 * step).add_(step * 0.5);
    lt::mark_step();
  }
  lt::wait_device_ops();
  EXPECT_EQ(lt::metrics::counter_value("UncachedCompile"), 1);
  EXPECT_EQ(lt::metrics::counter_value("TransferToDeviceSync"), 0);
}

// The device's memory is the engine's to count (PoCL enforces no limit; the CUDA backend
// counts what it allocates too): a value that does not
// fit is refused when it is traced, naming the device.
TEST_P(OffloadDeviceTest, ValuesBeyondTheMemoryLimitAreRefused) {
  const lt::DeviceGuard guard(device_);
  lt::set_device_memory_limit(1 << 20);
  const std::string message =
      lt_test::error_message([] { lt::zeros({1 << 19}).add(1.0).to_vector<float>(); });
  lt::set_device_memory_limit(0);
  lt_test::expect_mentions(message, {device_.str(), "1048576 bytes in all"});
}

// What the CUDA backend does on the host, against the fake driver.
class FakeCudaTest : public lt_test::EngineTest {
 protected:
  void SetUp() override {
    lt_test::EngineTest::SetUp();
    use_the_fake_cuda_driver();
  }
  void TearDown() override {
    gpu.release();
    EXPECT_EQ(gpu.faults(), std::vector<std::string>());
    gpu.recover();
    lt_test::EngineTest::TearDown();
  }
  // Waits (at most a minute) until `done`; false if it never was.
  static bool wait_until(const std::function<bool()>& done) {
    for (int i = 0; i < 6000 && !done(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }
  fake_cuda::Gpu& gpu = fake_cuda::Gpu::get();
  const Device cuda{DeviceType::cuda, 0};
};

// With the GPU stopped, the host uploads, traces and queues steps, and reuses its own memory:
// uploads are staged through pinned memory and nothing the host does waits for the device. When
// the GPU runs, the results are the values the host had when it uploaded them.
TEST_F(FakeCudaTest, UploadsAreStagedAndNothingWaitsForTheDevice) {
  const lt::DeviceGuard guard(cuda);
  lt::zeros({4}).add(1.0).to_vector<float>();  // compiles the step's program up front
  std::vector<float> host = values(4096);
  const std::vector<float> uploaded = host;
  gpu.hold();
  const int64_t launches = gpu.launches();
  Tensor x = lt::from_vector(host, {4096});
  std::fill(host.begin(), host.end(), -1.0f);  // the caller's memory is its own again at once
  Tensor y = lt::zeros({4096}).add(x.mul(2.0));
  lt::mark_step();
  // The step's launch is queued behind the upload, neither run.
  ASSERT_TRUE(wait_until([&] { return gpu.launches() > launches; }));
  EXPECT_GT(gpu.queued(), 1);
  EXPECT_EQ(lt::metrics::counter_value("TransferToDeviceSync"), 0);
  gpu.release();
  const std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], uploaded[i] * 2.0f) << i;
}

// Buffers released on the host while the device still has work on them are freed in stream
// order (cuMemFreeAsync, after that work): the device still holds them while the step waits,
// and gives all back once it has run.
TEST_F(FakeCudaTest, BuffersAreFreedAfterTheWorkQueuedOnThem) {
  const lt::DeviceGuard guard(cuda);
  lt::from_vector(values(64), {64}).mul(3.0).to_vector<float>();
  lt::wait_device_ops();
  gpu.drain();
  const int64_t live = gpu.live_allocations();
  gpu.hold();
  const int64_t launches = gpu.launches();
  {
    Tensor x = lt::from_vector(values(64), {64});
    Tensor y = x.mul(3.0);
    lt::mark_step();
    ASSERT_TRUE(wait_until([&] { return gpu.launches() > launches; }));
  }
  // The host has let go of both; the device has not run their step yet.
  EXPECT_GT(gpu.live_allocations(), live);
  gpu.release();
  lt::wait_device_ops();
  EXPECT_TRUE(wait_until([&] {
    gpu.drain();
    return gpu.live_allocations() == live;
  })) << gpu.live_allocations()
      << " allocations, " << live << " before";
}

// A step's launches are queued without waiting for the device to run the step before: with the
// GPU stopped, two steps are queued on it, and the third waits for the first to have run (the
// bound on steps in flight). An event recorded after them completes once the device has run
// them, and the values are the steps' in order.
TEST_F(FakeCudaTest, StepsAreQueuedWithoutWaitingForTheStepBefore) {
  const lt::DeviceGuard guard(cuda);
  const std::vector<float> v = values(256);
  Tensor x = lt::from_vector(v, {256});
  lt::mark_step();
  // Each step's program is compiled before the GPU stops: one launch a step.
  for (double c : {1.0, 2.0, 3.0}) {
    Tensor warm = lt::from_vector(v, {256});
    warm.add_(c);
    lt::mark_step();
  }
  lt::wait_device_ops();
  gpu.hold();
  const int64_t launches = gpu.launches();
  x.add_(1.0);
  lt::mark_step();
  x.add_(2.0);
  lt::mark_step();
  ASSERT_TRUE(wait_until([&] { return gpu.launches() >= launches + 2; }));
  x.add_(3.0);
  lt::mark_step();
  const lt::DeviceEvent event = lt::record_event();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(gpu.launches(), launches + 2);  // the third step waits for the first to run
  EXPECT_FALSE(event.done());
  gpu.release();
  event.wait();
  EXPECT_EQ(gpu.launches(), launches + 3);
  EXPECT_EQ(gpu.queued(), 0);
  const std::vector<float> got = x.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(got[i], ((v[i] + 1.0f) + 2.0f) + 3.0f) << i;
}

// A kernel that fails on the device is reported asynchronously, as GPUs do: reading its step's
// result raises the driver's message. The error stays, as a GPU's does: the next step fails with
// it too, and nothing hangs.
TEST_F(FakeCudaTest, AKernelThatFailsOnTheDeviceFailsItsStep) {
  const lt::DeviceGuard guard(cuda);
  const std::vector<float> v = values(256);
  const Tensor x = lt::from_vector(v, {256});
  lt::mark_step();
  gpu.fail_launch_after(0);
  const Tensor y = x.exp().mul(2.0);
  lt::mark_step();
  const std::string message = lt_test::error_message([&] { y.to_vector<float>(); });
  lt_test::expect_mentions(message, {"cuda", "unspecified launch failure (719)"});
  lt_test::expect_mentions(lt_test::error_message([&] { x.exp().to_vector<float>(); }),
                           {"unspecified launch failure (719)"});
  // Only here, where the GPU is a fake: one that recovers runs the step again.
  gpu.recover();
  const std::vector<float> again = x.exp().mul(2.0).to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_FLOAT_EQ(again[i], std::exp(v[i]) * 2.0f) << i;
}

// A program is kept on disk by a hash of its source, the compiler's version and the
// architecture: another device over the same folder (another process) loads it without compiling
// it, and it runs.
TEST_F(FakeCudaTest, ProgramsAreKeptOnDiskByCompilerArchitectureAndSource) {
  const lt_test::TempDir cache;
  lt::backend::offload::Routines routines(lt::backend::KernelDialect::cuda);
  const std::string copy = routines.copy(4);
  std::string why;
  const auto open = [&] {
    return lt::backend::cuda::Device::open(
        gpu.driver(), std::make_shared<fake_cuda::HostCompiler>(), std::nullopt, 0,
        cache.path().string(), size_t{1} << 30, &why);
  };
  const int64_t images = fake_cuda::HostCompiler::images.load();
  const auto first = open();
  ASSERT_NE(first, nullptr) << why;
  first->build({}, {}, routines.source());
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images + 1);
  const int64_t hits = lt::metrics::counter_value("KernelDiskCacheHit");
  const auto second = open();
  const std::shared_ptr<void> program = second->build({}, {}, routines.source());
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images + 1);  // nothing compiled
  EXPECT_EQ(lt::metrics::counter_value("KernelDiskCacheHit"), hits + 1);
  // The loaded program runs: 4-byte elements copied through the routine.
  const std::vector<float> src = values(100);
  const auto in = second->allocate(400), out = second->allocate(400);
  second->write(in.get(), src.data(), 400, false);
  const std::shared_ptr<void> kernel = second->kernel(program, copy);
  const int64_t n = 100, offset = 0, sizes[8] = {100}, strides[8] = {1};
  const int32_t rank = 1;
  void* in_handle = in.get();
  void* out_handle = out.get();
  int index = 0;
  for (const auto& [bytes, value] : std::vector<std::pair<size_t, const void*>>{{8, &in_handle},
                                                                                {8, &out_handle},
                                                                                {8, &n},
                                                                                {4, &rank},
                                                                                {64, sizes},
                                                                                {64, strides},
                                                                                {8, &offset},
                                                                                {64, strides},
                                                                                {8, &offset}}) {
    second->set_arg(kernel.get(), index++, bytes, value);
  }
  second->launch(kernel.get(), 128, 64);
  std::vector<float> got(100);
  second->read(out.get(), got.data(), 400);
  EXPECT_EQ(got, src);
}

// The folder keeps at most its byte bound of programs: a new one pushes out the least recently
// used, and one read from the folder counts as used.
TEST_F(FakeCudaTest, TheDiskCacheKeepsItsBoundDroppingTheLeastRecentlyUsed) {
  const lt_test::TempDir cache;
  lt::backend::offload::Routines copies4(lt::backend::KernelDialect::cuda),
      copies8(lt::backend::KernelDialect::cuda), copies2(lt::backend::KernelDialect::cuda);
  copies4.copy(4);
  copies8.copy(8);
  copies2.copy(2);
  std::string why;
  const auto open = [&](size_t bytes) {
    auto device =
        lt::backend::cuda::Device::open(gpu.driver(), std::make_shared<fake_cuda::HostCompiler>(),
                                        std::nullopt, 0, cache.path().string(), bytes, &why);
    EXPECT_NE(device, nullptr) << why;
    return device;
  };
  const std::filesystem::path folder = cache.path() / "cuda";
  const auto stored = [&] {
    size_t files = 0, bytes = 0;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      if (entry.path().extension() != ".cubin") continue;
      ++files;
      bytes += entry.file_size();
    }
    return std::pair{files, bytes};
  };
  open(size_t{1} << 30)->build({}, {}, copies4.source());
  const size_t one = stored().second;
  ASSERT_GT(one, 0u);
  // Room for two programs of this size, not three.
  const auto device = open(one * 5 / 2);
  device->build({}, {}, copies8.source());
  EXPECT_EQ(stored().first, 2u);
  const int64_t images = fake_cuda::HostCompiler::images.load();
  device->build({}, {}, copies4.source());  // read from the folder: now the most recently used
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images);
  device->build({}, {}, copies2.source());  // compiled: the copies8 program goes
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images + 1);
  EXPECT_EQ(stored().first, 2u);
  EXPECT_LE(stored().second, one * 5 / 2);
  device->build({}, {}, copies4.source());
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images + 1);  // still kept
  device->build({}, {}, copies8.source());
  EXPECT_EQ(fake_cuda::HostCompiler::images.load(), images + 2);  // compiled again
}

// Products go to cuBLASLt (row-major products as column-major ones, batched with strides, bf16
// in f32) and agree with the CPU; where the library has no algorithm for a shape (asked once
// per shape), the generated kernel computes them.
TEST_F(FakeCudaTest, ProductsGoToTheLibraryAndElseToTheGeneratedKernel) {
  const std::vector<float> a = values(3 * 6 * 9), b = values(9 * 11);
  const auto products = [&](int64_t rows) {
    const Tensor x = lt::from_vector(a, {3, 6, 9}).slice(1, 0, rows);
    const Tensor w = lt::from_vector(b, {9, 11});
    return std::vector<Tensor>{lt::matmul(x, w), lt::matmul(w.t(), x.transpose(1, 2)),
                               lt::matmul(x.to(lt::DType::bf16), w.to(lt::DType::bf16))};
  };
  const auto run = [&](const Device& device, int64_t rows) {
    const lt::DeviceGuard guard(device);
    std::vector<std::vector<double>> out;
    for (const Tensor& t : products(rows)) {
      out.push_back(t.to(lt::DType::f64).to_vector<double>());
    }
    return out;
  };
  // Shapes of their own for each half (plans are kept per shape).
  for (const bool library : {false, true}) {
    SCOPED_TRACE(library ? "cuBLASLt" : "generated kernel");
    const int64_t rows = library ? 6 : 5;
    const auto cpu = run(kCpu, rows);
    gpu.refuse_products = !library;
    const int64_t before = gpu.products.load();
    const auto got = run(cuda, rows);
    EXPECT_EQ(gpu.products.load() - before, library ? 3 : 0);
    for (size_t t = 0; t < cpu.size(); ++t) {
      ASSERT_EQ(got[t].size(), cpu[t].size());
      for (size_t i = 0; i < cpu[t].size(); ++i) {
        EXPECT_NEAR(got[t][i], cpu[t][i], 1e-5 * std::max(1.0, std::fabs(cpu[t][i])))
            << "product " << t << " element " << i;
      }
    }
  }
  // The plans are kept: the same products again ask the library nothing, and run on it.
  gpu.refuse_products = true;  // no algorithm now: the kept plans are used, not asked again
  const int64_t asked = gpu.heuristics.load(), before = gpu.products.load();
  run(cuda, 6);
  EXPECT_EQ(gpu.heuristics.load(), asked);
  EXPECT_EQ(gpu.products.load() - before, 3);
  gpu.refuse_products = false;
  const lt::DeviceGuard guard(cuda);
  EXPECT_EQ(lt::matmul_library(lt::DType::f32).rfind("cuBLASLt", 0), 0u)
      << lt::matmul_library(lt::DType::f32);
}

// cuBLASLt's workspace (32 MiB) is device memory too: once a product has run on the library, it
// counts against the device's memory with the engine's buffers, so a value that would fit
// beside the buffers alone is refused.
TEST_F(FakeCudaTest, TheLibrarysWorkspaceCountsAgainstTheDevicesMemory) {
  const lt::DeviceGuard guard(cuda);
  const Tensor x = lt::from_vector(values(6 * 9), {6, 9});
  const Tensor w = lt::from_vector(values(9 * 11), {9, 11});
  const int64_t before = gpu.products.load();
  lt::matmul(x, w).to_vector<float>();
  ASSERT_EQ(gpu.products.load() - before, 1);
  constexpr int64_t kWorkspace = int64_t{32} << 20;
  EXPECT_GE(lt::device_memory_stats().bytes_in_use, kWorkspace);
  // 16 MiB fits in 40 beside the small buffers, but not beside the workspace as well.
  lt::set_device_memory_limit(int64_t{40} << 20);
  const std::string message =
      lt_test::error_message([] { lt::zeros({int64_t{4} << 20}).add(1.0).to_vector<float>(); });
  lt::set_device_memory_limit(0);
  lt_test::expect_mentions(message, {"cannot allocate 16777216 bytes of device memory"});
}

INSTANTIATE_TEST_SUITE_P(Devices, OffloadDeviceTest,
                         ::testing::Values(DeviceType::opencl, DeviceType::cuda),
                         [](const ::testing::TestParamInfo<DeviceType>& info) {
                           return std::string(lt::device_type_name(info.param));
                         });

}  // namespace
