// The CPU backend's worker pool: every worker index at most once per run, work split
// dynamically finishes whatever number of workers comes, and an exception from a worker
// reaches the caller after every worker has returned. Runs under ThreadSanitizer too (with the
// pool's own threads there; OpenMP's elsewhere).
#include "backend/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <vector>

namespace {

using lt::backend::cpu::ThreadPool;

TEST(ThreadPoolTest, EachWorkerIndexRunsAtMostOnceAndTheWorkIsDone) {
  for (int size : {1, 2, 4}) {
    ThreadPool pool(size);
    ASSERT_EQ(pool.size(), size);
    for (int round = 0; round < 50; ++round) {
      std::mutex mu;
      std::multiset<int> workers;
      std::vector<int> items(1000, 0);
      std::atomic<size_t> next{0};
      pool.run([&](int worker) {
        {
          std::lock_guard<std::mutex> lock(mu);
          workers.insert(worker);
        }
        for (size_t i; (i = next.fetch_add(1)) < items.size();) items[i] += 1;
      });
      EXPECT_EQ(std::accumulate(items.begin(), items.end(), 0), 1000) << "size " << size;
      for (int w : workers) {
        EXPECT_GE(w, 0);
        EXPECT_LT(w, size);
        EXPECT_EQ(workers.count(w), 1u) << "worker " << w << " ran twice";
      }
    }
  }
}

// lt::set_num_threads: a run uses the workers asked for, within the pool's capacity, and can
// go back up to all of them.
TEST(ThreadPoolTest, SetWorkersLimitsTheWorkersOfLaterRuns) {
  ThreadPool pool(4);
  for (int asked : {1, 3, 0, 9, 4}) {
    pool.set_workers(asked);
    const int want = std::clamp(asked, 1, 4);
    EXPECT_EQ(pool.size(), want);
    std::mutex mu;
    std::set<int> workers;
    std::atomic<int> done{0};
    pool.run([&](int worker) {
      {
        std::lock_guard<std::mutex> lock(mu);
        workers.insert(worker);
      }
      for (int i; (i = done.fetch_add(1)) < 1000;) {
      }
    });
    EXPECT_GE(done.load(), 1000);
    EXPECT_LE(static_cast<int>(workers.size()), want) << "asked " << asked;
    for (int w : workers) EXPECT_LT(w, want);
  }
}

TEST(ThreadPoolTest, AWorkersExceptionReachesTheCallerAndThePoolGoesOn) {
  ThreadPool pool(2);
  std::atomic<int> returned{0};
  EXPECT_THROW(pool.run([&](int worker) {
    if (worker == pool.size() - 1) throw std::runtime_error("kernel failed");
    returned.fetch_add(1);
  }),
               std::runtime_error);
  std::atomic<int> ran{0};
  pool.run([&](int) { ran.fetch_add(1); });
  EXPECT_GE(ran.load(), 1);
}

}  // namespace
