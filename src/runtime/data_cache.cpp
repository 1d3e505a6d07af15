#include "runtime/data_cache.h"

#include <cstring>
#include <list>
#include <mutex>
#include <unordered_map>

#include "ir/dtype_traits.h"
#include "metrics/metrics_registry.h"
#include "runtime/config.h"
#include "runtime/device.h"

namespace lt::runtime {

namespace {

struct Key {
  DType dtype;
  uint64_t bits;
  Device device;
  bool operator==(const Key& o) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return (k.bits * 31 + static_cast<size_t>(k.dtype)) * 31 + static_cast<size_t>(k.device.index);
  }
};

// The value as stored on the device, in its dtype's layout (as a kernel converts it), keyed by
// those bytes.
Key key_of(double value, DType dtype, const Device& device, unsigned char* bytes) {
  Key key{dtype, 0, device};
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T element = convert_element<T>(value);
    std::memcpy(bytes, &element, sizeof element);
    std::memcpy(&key.bits, &element, sizeof element);
  });
  return key;
}

class DataCache {
 public:
  DeviceDataPtr get(double value, DType dtype, const Device& device) {
    static metrics::Counter& hits = metrics::counter("DeviceDataCacheHit");
    static metrics::Counter& misses = metrics::counter("DeviceDataCacheMiss");
    unsigned char bytes[8];
    Key key = key_of(value, dtype, device, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      hits.add();
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    misses.add();
    DeviceDataPtr data = upload_scalar(value, dtype, device);
    data->holders.fetch_add(1);
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(data, lru_.begin()));
    while (map_.size() > std::max<size_t>(1, config().data_cache_size)) {
      auto victim = map_.find(lru_.back());
      victim->second.first->holders.fetch_sub(1);
      map_.erase(victim);
      lru_.pop_back();
    }
    return data;
  }

 private:
  std::mutex mu_;
  std::list<Key> lru_;
  std::unordered_map<Key, std::pair<DeviceDataPtr, std::list<Key>::iterator>, KeyHash> map_;
};

}  // namespace

DeviceDataPtr upload_scalar(double value, DType dtype, const Device& device) {
  unsigned char bytes[8];
  key_of(value, dtype, device, bytes);
  return upload(bytes, Shape{}, dtype, device, /*synchronous=*/true);
}

DeviceDataPtr cached_scalar_data(double value, DType dtype, const Device& device) {
  static DataCache* cache = new DataCache();
  return cache->get(value, dtype, device);
}

}  // namespace lt::runtime
