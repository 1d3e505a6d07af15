#include "lazytensor/shape.h"

#include <algorithm>

#include "lazytensor/error.h"

namespace lt {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  if (dims.size() > kMaxRank) {
    throw Error("Shape: rank " + std::to_string(dims.size()) + " exceeds the maximum of " +
                std::to_string(kMaxRank));
  }
  rank_ = static_cast<int>(dims.size());
  std::copy(dims.begin(), dims.end(), dims_);
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  return rank_ == other.rank_ && std::equal(begin(), end(), other.begin());
}

}  // namespace lt
