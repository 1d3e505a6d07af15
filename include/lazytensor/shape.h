#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lt {

// A tensor's sizes, stored inline (no heap allocation), up to kMaxRank dimensions.
class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + rank_; }
  // Product of the sizes; 1 for a rank-0 (scalar) shape.
  int64_t numel() const;
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }
  std::string str() const;  // "[2, 3]"

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  int64_t dims_[kMaxRank] = {};
  int rank_ = 0;
};

}  // namespace lt
