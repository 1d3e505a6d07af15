#include "runtime/step_journal.h"

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace lt::runtime {

struct StepRecord {
  int64_t step = 0;
  std::vector<std::function<void()>> undos;
  std::atomic<bool> failed{false};
  bool undone = false;  // guarded by the journal's mutex
};

namespace {

struct Journal {
  std::mutex mu;
  std::vector<std::function<void()>> tracing;  // undos of the step being traced
  std::shared_ptr<StepRecord> newest;
  std::atomic<uint64_t> cuts{0};
};

Journal& journal() {
  static Journal* j = new Journal();
  return *j;
}

}  // namespace

void on_step_failure(std::function<void()> undo) {
  Journal& j = journal();
  const std::lock_guard<std::mutex> lock(j.mu);
  j.tracing.push_back(std::move(undo));
}

uint64_t steps_cut() {
  return journal().cuts.load(std::memory_order_acquire);
}

std::shared_ptr<StepRecord> begin_step_record(int64_t step) {
  Journal& j = journal();
  auto record = std::make_shared<StepRecord>();
  record->step = step;
  const std::lock_guard<std::mutex> lock(j.mu);
  record->undos.swap(j.tracing);
  j.newest = record;
  j.cuts.fetch_add(1, std::memory_order_release);
  return record;
}

void mark_step_failed(const std::shared_ptr<StepRecord>& record) {
  record->failed.store(true, std::memory_order_release);
}

void settle_failed_step() {
  Journal& j = journal();
  std::vector<std::function<void()>> undos;
  {
    const std::lock_guard<std::mutex> lock(j.mu);
    if (!j.newest || j.newest->undone || !j.newest->failed.load(std::memory_order_acquire)) {
      return;
    }
    j.newest->undone = true;
    undos.swap(j.newest->undos);
  }
  // Outside the lock: an undo may take its owner's locks (the generator's).
  for (auto it = undos.rbegin(); it != undos.rend(); ++it) (*it)();
}

}  // namespace lt::runtime
