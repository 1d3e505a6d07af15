#pragma once
#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

namespace lt::ir {

// A vector that keeps its first N elements inside the object and spills past them to the
// heap. IR nodes hold a few operands and attributes each; tracing creates one node per op,
// so an allocation per field would double the cost of an op.
template <class T, size_t N>
class InlineVector {
 public:
  InlineVector() = default;
  InlineVector(std::initializer_list<T> values) {
    for (const T& v : values) push_back(v);
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return i < N ? inline_[i] : spill_[i - N]; }
  const T& operator[](size_t i) const { return i < N ? inline_[i] : spill_[i - N]; }
  T& back() { return (*this)[size_ - 1]; }

  void push_back(T value) {
    if (size_ < N) {
      inline_[size_] = std::move(value);
    } else {
      spill_.push_back(std::move(value));
    }
    ++size_;
  }
  T pop_back() {
    T value = std::move(back());
    if (size_ > N) {
      spill_.pop_back();
    } else {
      inline_[size_ - 1] = T();
    }
    --size_;
    return value;
  }

  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < size_; ++i) f((*this)[i]);
  }

 private:
  T inline_[N] = {};
  std::vector<T> spill_;
  size_t size_ = 0;
};

}  // namespace lt::ir
