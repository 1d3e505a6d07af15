#pragma once
#include "runtime/device_data.h"

namespace lt::runtime {

// Scalars as device data (ScalarPolicy::cached), after LTC's DataCacheArena: an LRU keyed by
// dtype and the value's bits. A hit costs nothing; a miss uploads once, synchronously.
// Cached values count as held, so no graph ever writes over them.
DeviceDataPtr cached_scalar_data(double value, DType dtype, const Device& device);

// One synchronous upload of a rank-0 value (ScalarPolicy::uncached, and cache misses).
DeviceDataPtr upload_scalar(double value, DType dtype, const Device& device);

}  // namespace lt::runtime
