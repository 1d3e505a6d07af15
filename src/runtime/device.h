#pragma once
// The runtime's door to the devices, for the front ends: every value they put on a device, read
// back, or ask about goes through here. Only the runtime talks to a backend (runtime/backends.h);
// tracing and the public API never include backend/.
#include <cstddef>
#include <cstdint>
#include <functional>

#include "ir/node.h"
#include "lazytensor/device.h"
#include "runtime/device_data.h"

namespace lt::runtime {

// The IR leaf that reads `data` (one per value, so a graph sees each buffer once).
ir::NodePtr leaf_node(const DeviceDataPtr& data);

// New device memory on `device` holding a copy of `values` (shape.numel() elements of
// `dtype`): asynchronous (the host memory may be reused at once) unless `synchronous`.
DeviceDataPtr upload(const void* values, const Shape& shape, DType dtype, const Device& device,
                     bool synchronous = false);
// New device memory on `device` whose bytes `fill` writes on the host (given where to write
// them): in place where the host addresses the device's memory (no host array and no staging
// copy: random initialization), through one upload otherwise.
DeviceDataPtr fill_from_host(const Shape& shape, DType dtype, const Device& device,
                             const std::function<void(void*)>& fill);
// Waits for `data`'s value and copies its bytes to `dst`; throws if its step failed.
void download(const DeviceData& data, void* dst);
// `data`'s bytes where the host can read them in place, once the step computing them is done;
// throws (its message prefixed by `op`) if that step failed. Only for a host-addressable device.
void* host_address(const DeviceData& data, const char* op);
// Whether the host reads and writes `device`'s memory in place (a CPU's does).
bool host_addressable(const Device& device);
// Whether a row group's row-local temporaries cost `device` no memory (backend::Backend), with
// row groups on (lt::set_row_groups).
bool keeps_row_local_temporaries(const Device& device);
// Device data over memory its owner keeps (from_external): no step writes over it, and
// `release` runs when the last holder lets go. Only for a host-addressable device.
DeviceDataPtr wrap_external(const void* data, const Shape& shape, DType dtype, const Device& device,
                            std::function<void()> release);

// Total memory of `device`, and what can still be allocated, in bytes.
int64_t memory_capacity(const Device& device);
int64_t memory_available(const Device& device);

}  // namespace lt::runtime
