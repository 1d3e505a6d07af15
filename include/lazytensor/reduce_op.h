#pragma once
// How a collective combines the ranks' values. A leaf header: the engine's collectives layer
// uses it without the Tensor API.

namespace lt::distributed {

enum class ReduceOp { sum, mean, max };

}  // namespace lt::distributed
