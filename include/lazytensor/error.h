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

// An index out of range (an embedding id, a target class, an index_select row): the message
// names the op, the value, the valid range and the position. Python raises it as
// lazytensor.IndexError, which is both a lazytensor.Error and a builtin IndexError.
class IndexError : public Error {
 public:
  explicit IndexError(const std::string& what) : Error(what) {}
};

}  // namespace lt
