#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/runtime.h"
#include "runtime/tensor_impl.h"

namespace lt::runtime {

// Turns the pending values of `tensors` into one graph, finds or compiles its executable and
// launches it, rebinding each tensor to its (future) device data. Returns without waiting.
// Donation (writing an output into an input's buffer) is allowed only when every pending
// tensor is in the graph, since a pending tensor left out might still read that buffer.
void sync_tensors(const std::vector<std::shared_ptr<TensorImpl>>& tensors, bool allow_donation);

lt::StepStats last_step_stats();
std::string last_recompile_reason();
std::vector<int64_t> compiles_per_step();
size_t compile_cache_entries();

}  // namespace lt::runtime
