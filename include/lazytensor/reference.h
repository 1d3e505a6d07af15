#pragma once
#include <vector>

#include "lazytensor/tensor.h"

namespace lt::reference {

// Evaluates a tensor's pending computation op by op in double precision, with each op's
// reference definition from the op table, without launching anything. Leaves that hold device
// data are read (waiting for them). For tests and debugging: slow, but independent of the
// compiler and the kernels.
std::vector<double> evaluate(const Tensor& tensor);

}  // namespace lt::reference
