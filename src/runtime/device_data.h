#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "backend/buffer.h"
#include "ir/node.h"
#include "lazytensor/device.h"

namespace lt::runtime {

// A tensor value that lives in device memory (or will, once the stream gets to it).
struct DeviceData {
  DeviceData(const Shape& s, DType d, const Device& where, backend::BufferPtr b)
      : shape(s), dtype(d), device(where), buffer(std::move(b)) {}

  Shape shape;
  DType dtype;
  Device device;
  backend::BufferPtr buffer;
  // Tensors (and caches) that hold this value. A graph may write an output into the buffer
  // only when nobody holds it: otherwise someone would see it change.
  std::atomic<int> holders{0};
  // The IR leaf for this value, shared by every use, behind a spin lock: ops on several threads
  // may read one value at once, and a mutex would cost every traced op far more.
  std::atomic_flag leaf_lock = ATOMIC_FLAG_INIT;
  std::weak_ptr<ir::Node> leaf;
  // Integer values uploaded from the host (token ids, targets): their least and greatest
  // value, the greatest negative one (a value other than an ignored id such as -100 hides
  // behind the least) and the first linear position of each, so that index ops check ids as
  // they are traced, where the mistake is made, instead of failing the step.
  struct HostRange {
    int64_t min = 0, max = 0, min_at = 0, max_at = 0;
    std::optional<int64_t> max_negative;
    int64_t max_negative_at = 0;
  };
  std::optional<HostRange> host_range;
};

using DeviceDataPtr = std::shared_ptr<DeviceData>;

}  // namespace lt::runtime
