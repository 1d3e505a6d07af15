#pragma once
#include <stdexcept>
#include <string>

namespace lt {

// Every user-facing failure throws lt::Error. The message names the op and the offending
// shapes, dtypes or values; the tensors involved keep their previous values.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace lt
