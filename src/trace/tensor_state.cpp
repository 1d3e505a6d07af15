#include "trace/tensor_state.h"

#include "lazytensor/error.h"

namespace lt::trace {

namespace {

// What tells this front end's states from another's: its address.
constexpr char kTensorApi = 0;

}  // namespace

TensorState::TensorState() : FrontEndState(&kTensorApi) {}

TensorState* find_state(const TensorImpl& impl) {
  runtime::FrontEndState* state = impl.front_end.load(std::memory_order_acquire);
  if (state == nullptr) return nullptr;
  if (state->kind != &kTensorApi) {
    throw Error("a tensor made by another front end reached the Tensor API");
  }
  return static_cast<TensorState*>(state);
}

TensorState& state_of(TensorImpl& impl) {
  if (TensorState* state = find_state(impl)) return *state;
  auto made = std::make_unique<TensorState>();
  runtime::FrontEndState* expected = nullptr;
  // Another thread may make one at the same moment: the first to publish wins.
  if (impl.front_end.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel)) {
    return *made.release();
  }
  return *find_state(impl);
}

}  // namespace lt::trace
