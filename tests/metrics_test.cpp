// The metrics registry: counters, timers, the text and JSON reports, and concurrent updates.
// Each test touches names of its own, so tests stay independent of each other and of the engine.
#include <gtest/gtest.h>
#include <lazytensor/lazytensor.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace metrics = lt::metrics;

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Each test counts from zero, also when the suite is repeated.
class MetricsTest : public testing::Test {
 protected:
  void SetUp() override { metrics::reset(); }
};

TEST_F(MetricsTest, UntouchedNamesReadAsZero) {
  EXPECT_EQ(metrics::counter_value("MetricsTest.NeverTouched"), 0);
  const metrics::TimerStats stats = metrics::timer_stats("MetricsTest.NeverTimed");
  EXPECT_EQ(stats.count, 0);
  EXPECT_EQ(stats.total_seconds, 0);
  EXPECT_EQ(stats.min_seconds, 0);
  EXPECT_EQ(stats.max_seconds, 0);
  EXPECT_EQ(stats.median_seconds, 0);
}

TEST_F(MetricsTest, IncrementAddsItsDelta) {
  metrics::increment("MetricsTest.Increment");
  metrics::increment("MetricsTest.Increment", 41);
  EXPECT_EQ(metrics::counter_value("MetricsTest.Increment"), 42);
  EXPECT_TRUE(contains(metrics::counter_names(), "MetricsTest.Increment"));
}

TEST_F(MetricsTest, RecordTimeKeepsStats) {
  for (double seconds : {0.5, 1.5, 1.0}) metrics::record_time("MetricsTest.Timer", seconds);
  const metrics::TimerStats stats = metrics::timer_stats("MetricsTest.Timer");
  EXPECT_EQ(stats.count, 3);
  EXPECT_DOUBLE_EQ(stats.total_seconds, 3.0);
  EXPECT_DOUBLE_EQ(stats.min_seconds, 0.5);
  EXPECT_DOUBLE_EQ(stats.max_seconds, 1.5);
  EXPECT_DOUBLE_EQ(stats.median_seconds, 1.0);
  EXPECT_TRUE(contains(metrics::timer_names(), "MetricsTest.Timer"));
}

TEST_F(MetricsTest, ResetZeroesEverything) {
  metrics::increment("MetricsTest.Reset", 5);
  metrics::record_time("MetricsTest.ResetTimer", 2.0);
  const lt::Tensor t = lt::from_vector(std::vector<float>{1, 2}, {2});
  lt::wait_device_ops();  // in case the upload is counted when it completes
  ASSERT_GE(metrics::counter_value("TransferToDeviceAsync"), 1);

  metrics::reset();
  EXPECT_EQ(metrics::counter_value("MetricsTest.Reset"), 0);
  EXPECT_EQ(metrics::counter_value("TransferToDeviceAsync"), 0);
  const metrics::TimerStats stats = metrics::timer_stats("MetricsTest.ResetTimer");
  EXPECT_EQ(stats.count, 0);
  EXPECT_EQ(stats.total_seconds, 0);

  // Counting starts again from zero.
  metrics::increment("MetricsTest.Reset");
  EXPECT_EQ(metrics::counter_value("MetricsTest.Reset"), 1);
}

TEST_F(MetricsTest, ReportNamesWhatWasTouched) {
  metrics::increment("MetricsTest.ReportCounter", 7);
  metrics::record_time("MetricsTest.ReportTimer", 0.25);
  const lt::Tensor t = lt::from_vector(std::vector<float>{1, 2}, {2});
  lt::wait_device_ops();  // in case the upload is counted when it completes
  const std::string report = metrics::report();
  EXPECT_NE(report.find("MetricsTest.ReportCounter"), std::string::npos) << report;
  EXPECT_NE(report.find("MetricsTest.ReportTimer"), std::string::npos) << report;
  EXPECT_NE(report.find("TransferToDeviceAsync"), std::string::npos) << report;
}

TEST_F(MetricsTest, ReportJsonIsValidJson) {
  metrics::increment("MetricsTest.JsonCounter", 7);
  // A user's counter name may hold characters that JSON must escape.
  const std::string odd_name = "MetricsTest \"quoted\" back\\slash";
  metrics::increment(odd_name, 3);
  metrics::record_time("MetricsTest.JsonTimer", 0.25);
  metrics::record_time("MetricsTest.JsonTimer", 0.75);

  const std::string text = metrics::report_json();
  nlohmann::json report;
  ASSERT_NO_THROW(report = nlohmann::json::parse(text)) << text;
  ASSERT_TRUE(report.is_object()) << text;
  ASSERT_TRUE(report.contains("counters")) << text;
  ASSERT_TRUE(report.contains("timers")) << text;

  const nlohmann::json& counters = report["counters"];
  ASSERT_TRUE(counters.contains("MetricsTest.JsonCounter")) << text;
  EXPECT_EQ(counters["MetricsTest.JsonCounter"].get<int64_t>(), 7);
  ASSERT_TRUE(counters.contains(odd_name)) << text;
  EXPECT_EQ(counters[odd_name].get<int64_t>(), 3);

  ASSERT_TRUE(report["timers"].contains("MetricsTest.JsonTimer")) << text;
  const nlohmann::json& timer = report["timers"]["MetricsTest.JsonTimer"];
  ASSERT_TRUE(timer.contains("count")) << text;
  EXPECT_EQ(timer["count"].get<int64_t>(), 2);
  // The total's key may carry a unit, as in "total_seconds".
  double total = -1;
  for (const auto& item : timer.items()) {
    if (item.key().starts_with("total")) total = item.value().get<double>();
  }
  EXPECT_DOUBLE_EQ(total, 1.0) << text;
}

TEST_F(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 10000;
  constexpr int kSamples = 1000;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([t] {
      // Each thread also creates a name of its own while the others update theirs.
      const std::string own = "MetricsTest.Thread" + std::to_string(t);
      for (int i = 0; i < kIncrements; ++i) {
        metrics::increment("MetricsTest.Shared");
        metrics::increment(own);
      }
      for (int i = 0; i < kSamples; ++i) metrics::record_time("MetricsTest.SharedTimer", 0.001);
    });
  }
  // Reports taken while the writers run must still be well formed.
  std::atomic<int> malformed = 0;
  std::thread reader([&malformed] {
    for (int i = 0; i < 50; ++i) {
      metrics::report();
      if (!nlohmann::json::accept(metrics::report_json())) ++malformed;
    }
  });
  for (std::thread& writer : writers) writer.join();
  reader.join();

  EXPECT_EQ(malformed.load(), 0);
  EXPECT_EQ(metrics::counter_value("MetricsTest.Shared"), kThreads * kIncrements);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(metrics::counter_value("MetricsTest.Thread" + std::to_string(t)), kIncrements);
  }
  const metrics::TimerStats stats = metrics::timer_stats("MetricsTest.SharedTimer");
  EXPECT_EQ(stats.count, kThreads * kSamples);
  EXPECT_NEAR(stats.total_seconds, kThreads * kSamples * 0.001, 1e-9);
}

}  // namespace
