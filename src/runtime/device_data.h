#pragma once
#include <atomic>
#include <memory>
#include <mutex>

#include "backend/buffer.h"
#include "ir/node.h"

namespace lt::runtime {

// A tensor value that lives in device memory (or will, once the stream gets to it).
struct DeviceData {
  DeviceData(const Shape& s, DType d, backend::BufferPtr b)
      : shape(s), dtype(d), buffer(std::move(b)) {}

  Shape shape;
  DType dtype;
  backend::BufferPtr buffer;
  // Tensors (and caches) that hold this value. A graph may write an output into the buffer
  // only when nobody holds it: otherwise someone would see it change.
  std::atomic<int> holders{0};
  std::mutex leaf_mu;            // ops on several threads may read one value at once
  std::weak_ptr<ir::Node> leaf;  // the IR leaf for this value, shared by every use
};

using DeviceDataPtr = std::shared_ptr<DeviceData>;

// The IR leaf that reads `data` (one per value, so a graph sees each buffer once).
ir::NodePtr leaf_node(const DeviceDataPtr& data);

}  // namespace lt::runtime
