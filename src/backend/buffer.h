#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backend/failure.h"

namespace lt::backend {

// A block of device memory. Freed through its backend when the last holder lets go.
// A computation that was to fill it and failed marks it failed; reading it then throws.
class Buffer {
 public:
  using Release = std::function<void(void*, size_t)>;
  Buffer(void* data, size_t bytes, Release release)
      : data_(data), bytes_(bytes), release_(std::move(release)) {}
  ~Buffer() {
    if (release_) release_(data_, bytes_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  void set_error(const Failure& failure) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = failure;
    failed_.store(true, std::memory_order_release);
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  Failure error() const {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void* data_;
  size_t bytes_;
  Release release_;
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  Failure error_;
};

using BufferPtr = std::shared_ptr<Buffer>;

}  // namespace lt::backend
