#pragma once
// Host state that tracing a step changes (an optimizer's step counts and new state, the
// random generator's offset) registers how to put it back. A step that fails on the device
// commits nothing there; when its failure is raised on the host, the newest step's undos run,
// so the host's state matches the device's again and the next step runs as if the failed one
// had been skipped.
#include <cstdint>
#include <functional>
#include <memory>

namespace lt::runtime {

// Registers `undo` for the step being traced (the one the next mark_step cuts).
void on_step_failure(std::function<void()> undo);
// How many steps mark_step has cut: state registers one undo per step by comparing it.
uint64_t steps_cut();

// The executor's side. A step's record, shared with its executions' failure callbacks.
struct StepRecord;
// At a cut: the undos registered since the last cut, as the new newest step's record.
std::shared_ptr<StepRecord> begin_step_record(int64_t step);
// Called on the device stream when an execution of the step fails.
void mark_step_failed(const std::shared_ptr<StepRecord>& record);
// Called on the host where a step's failure is raised: undoes the newest step's host changes
// if it failed (once). An older failed step is not undone: newer steps were traced on top of
// its host state.
void settle_failed_step();

}  // namespace lt::runtime
