// Devices: every tensor has one, factories use the default device, an op's tensors must share
// one, a cut makes one graph per device, and backends come from a registry.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/registry.h"
#include "lazytensor/lazytensor.h"
#include "test_support.h"

namespace {

using lt::Device;
using lt::DeviceType;
using lt::Tensor;
using lt_test::error_message;
using lt_test::expect_mentions;

const Device kCpu0{DeviceType::cpu, 0};
const Device kCpu1{DeviceType::cpu, 1};

class DeviceTest : public lt_test::EngineTest {};

TEST_F(DeviceTest, TensorsLiveOnTheDefaultDevice) {
  EXPECT_EQ(lt::default_device(), kCpu0);
  EXPECT_EQ(lt::from_vector(values(3), {3}).device(), kCpu0);
  EXPECT_EQ(kCpu1.str(), "cpu:1");
  const lt::DeviceGuard guard(kCpu1);
  const Tensor a = lt::from_vector(values(3), {3});
  const Tensor b = lt::zeros({3});
  EXPECT_EQ(a.device(), kCpu1);
  EXPECT_EQ(b.device(), kCpu1);
  EXPECT_EQ(a.add(b).mul(2.0).sum().device(), kCpu1);
}

// One cut with pending values on two devices launches a graph on each; both compute right.
TEST_F(DeviceTest, ACutSpanningTwoDevicesComputesBoth) {
  const std::vector<float> x0 = values(100), y0 = values(100);
  Tensor x = lt::from_vector(x0, {100});
  Tensor y;
  {
    const lt::DeviceGuard guard(kCpu1);
    y = lt::from_vector(y0, {100});
  }
  x.mul_(3.0).add_(1.0);
  y.mul_(-2.0).add_(0.5);
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_FALSE(x.is_pending());
  EXPECT_FALSE(y.is_pending());
  const std::vector<double> gx = x.to_vector<double>(), gy = y.to_vector<double>();
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(gx[i], x0[i] * 3.0f + 1.0f) << i;
    EXPECT_EQ(gy[i], y0[i] * -2.0f + 0.5f) << i;
  }
}

TEST_F(DeviceTest, TensorsOfTwoDevicesDoNotMeet) {
  Tensor a = lt::from_vector(values(4), {4});
  Tensor b;
  {
    const lt::DeviceGuard guard(kCpu1);
    b = lt::from_vector(values(4), {4});
  }
  const std::vector<double> a_before = a.to_vector<double>();
  expect_mentions(error_message([&] { a.add(b); }), {"add", "cpu:0", "cpu:1"});
  expect_mentions(error_message([&] { a.add_(b, 0.5); }), {"add_", "cpu:0", "cpu:1"});
  expect_mentions(error_message([&] { a.addcdiv_(a, b, 0.1); }), {"addcdiv_", "cpu:1"});
  expect_mentions(error_message([&] { a.lerp_(b, 0.3); }), {"lerp_", "cpu:1"});
  expect_mentions(error_message([&] { a.copy_(b); }), {"copy_", "cpu:0", "cpu:1"});
  EXPECT_FALSE(a.is_pending());
  EXPECT_EQ(a.to_vector<double>(), a_before);
}

TEST_F(DeviceTest, AnUnknownDeviceFailsWhereItIsNamed) {
  for (const lt::DeviceKind& kind : lt::device_kinds()) {
    if (kind.name != "cuda" || kind.available) continue;  // a machine without a GPU
    expect_mentions(error_message([] {
                      lt::set_default_device({DeviceType::cuda, 0});
                    }),
                    {"cuda:0", "unavailable", kind.reason});
  }
  expect_mentions(error_message([] { lt::set_default_device({DeviceType::cpu, -1}); }), {"cpu:-1"});
  EXPECT_EQ(lt::default_device(), kCpu0);
}

TEST_F(DeviceTest, EachDeviceAccountsForItsOwnMemory) {
  const lt::DeviceGuard guard(kCpu1);
  const int64_t before = lt::device_memory_stats().bytes_in_use;
  const Tensor big = lt::zeros({1 << 16});
  lt::mark_step();
  lt::wait_device_ops();
  EXPECT_GE(lt::device_memory_stats().bytes_in_use - before, (1 << 16) * 4);
}

// A backend registered for a device type serves it: here the CPU backend stands in for a
// CUDA one, which is how a new backend plugs in.
TEST_F(DeviceTest, ARegisteredBackendServesItsDeviceType) {
  lt::backend::register_backend(DeviceType::cuda, lt::backend::cpu::make_backend);
  lt::backend::AvailabilityProbe cuda_probe =
      lt::backend::register_device_probe(DeviceType::cuda, [] {
        return lt::backend::Availability{true, "the CPU standing in"};
      });
  const lt_test::Restore restore([&] {
    lt::backend::unregister_backend(DeviceType::cuda);
    lt::backend::register_device_probe(DeviceType::cuda, std::move(cuda_probe));
  });
  const Device cuda{DeviceType::cuda, 0};
  const lt::DeviceGuard guard(cuda);
  const std::vector<float> x0 = values(10);
  const Tensor x = lt::from_vector(x0, {10}).mul(2.0);
  EXPECT_EQ(x.device(), cuda);
  const std::vector<double> got = x.to_vector<double>();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(got[i], x0[i] * 2.0f);
}

// lt::set_num_threads applies from the next step on, and a step's results do not depend on it
// (work is split into the same units whatever the number of threads).
TEST_F(DeviceTest, SetNumThreadsChangesNoResult) {
  const int before = lt::get_num_threads();
  const Tensor x = lt::randn({300, 257}, 11);
  const Tensor w = lt::randn({257, 64}, 12);
  std::vector<std::vector<float>> results, products;
  for (int threads : {1, 2, before}) {
    lt::set_num_threads(threads);
    EXPECT_EQ(lt::get_num_threads(), threads);
    results.push_back((x.exp() + x.sum({1}, true)).softmax(1).to_vector<float>());
    products.push_back(lt::matmul(x, w).to_vector<float>());
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0], results[2]);
  // The matrix library may split its sums by thread: equal to rounding.
  for (size_t i = 0; i < products[0].size(); ++i) {
    ASSERT_NEAR(products[0][i], products[1][i], 1e-4f) << i;
  }
  expect_mentions(error_message([] { lt::set_num_threads(0); }), {"set_num_threads", "0"});
  EXPECT_EQ(lt::get_num_threads(), before);
}

// Each device kind is listed, available or with the reason it is not; choosing an unavailable
// one fails where it is chosen, with that reason, and changes nothing.
TEST_F(DeviceTest, DeviceKindsSayWhatIsAvailableAndWhy) {
  const std::vector<lt::DeviceKind> kinds = lt::device_kinds();
  ASSERT_EQ(kinds.size(), 3u);
  EXPECT_EQ(kinds[0].name, "cpu");
  EXPECT_TRUE(kinds[0].available);
  // What the machine has, or lacks, is said too: the kinds' probes ran.
  expect_mentions(kinds[1].reason, {"CUDA driver"});
  expect_mentions(kinds[2].reason, {"OpenCL"});
  for (size_t k : {1, 2}) {
    SCOPED_TRACE(kinds[k].name);
    if (kinds[k].available) {
      lt::set_default_device(kinds[k].name);  // the OpenCL backend where a driver is installed
      EXPECT_EQ(lt::from_vector(values(3), {3}).device().str(), kinds[k].name + ":0");
      lt::set_default_device("cpu");
      continue;
    }
    expect_mentions(error_message([&] { lt::set_default_device(kinds[k].name); }),
                    {kinds[k].name + ":0", "unavailable", kinds[k].reason});
  }
  EXPECT_EQ(lt::default_device(), kCpu0);
  EXPECT_EQ(lt::parse_device("cpu:1"), kCpu1);
  EXPECT_EQ(lt::parse_device("opencl"), (Device{DeviceType::opencl, 0}));
  EXPECT_EQ((Device{DeviceType::opencl, 2}).str(), "opencl:2");
  for (const char* bad : {"tpu", "cpu:", "cpu:x", "cpu:-1", ""}) {
    expect_mentions(error_message([&] { lt::parse_device(bad); }), {"cpu, cuda or opencl"});
  }
  lt::set_default_device("cpu:1");
  EXPECT_EQ(lt::default_device(), kCpu1);
  lt::set_default_device("cpu");
  EXPECT_EQ(lt::default_device(), kCpu0);
}

}  // namespace
