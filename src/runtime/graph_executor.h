#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lazytensor/runtime.h"
#include "runtime/tensor_impl.h"

namespace lt::runtime {

// mark_step: turns the pending values of every live tensor into one graph, finds or compiles
// its executable and launches it, rebinding each tensor to its (future) device data. Returns
// without waiting. Outputs may take the buffers of inputs nothing else holds (donation).
void sync_pending();
// The same for some tensors only, before `op` reads them; returns the first one's device data.
// The graph also keeps what it computes: every live pending tensor whose value it computes on
// the way, or that is one op on its values, becomes data too. No donation: a pending tensor
// left out of the graph might still read an input's buffer.
DeviceDataPtr sync_tensors(const std::vector<std::shared_ptr<TensorImpl>>& tensors, const char* op);

lt::StepStats last_step_stats();
std::string last_recompile_reason();
std::vector<int64_t> compiles_per_step();
size_t compile_cache_entries();
void clear_compile_cache();
// Lets the warning about reads that run earlier steps again (no mark_step) be given again.
void rearm_rerunning_reads_warning();

}  // namespace lt::runtime
