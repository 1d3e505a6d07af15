#pragma once
#include <cstdint>
#include <exception>
#include <string>

#include "lazytensor/error.h"

namespace lt::backend {

// Why a step failed, kept until the host reads a value of the step or waits for the device,
// and raised then as the kind of error it was (an index error stays lt::IndexError).
struct Failure {
  std::string message;
  bool index = false;
  int64_t step = 0;  // the executor's step number (mark_step's and reads' syncs)

  bool empty() const { return message.empty(); }

  static Failure of(const std::exception& e, int64_t step) {
    return {"step " + std::to_string(step) + " failed: " + e.what(),
            dynamic_cast<const IndexError*>(&e) != nullptr, step};
  }
  [[noreturn]] void raise(const std::string& prefix = "") const {
    if (index) throw IndexError(prefix + message);
    throw Error(prefix + message);
  }
};

}  // namespace lt::backend
