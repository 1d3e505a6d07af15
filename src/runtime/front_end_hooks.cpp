#include "runtime/front_end_hooks.h"

#include <array>
#include <atomic>
#include <cstddef>

#include "lazytensor/error.h"

namespace lt::runtime {

namespace {

// A few front ends at most; lock-free to read, since the op hooks run on every traced op.
constexpr size_t kMaxHooks = 8;

struct Hooks {
  std::array<std::atomic<FrontEndHook>, kMaxHooks> hooks{};
  std::atomic<size_t> count{0};

  void add(FrontEndHook hook, const char* what) {
    const size_t slot = count.load();
    if (slot == kMaxHooks) throw Error(std::string(what) + ": too many front-end hooks");
    hooks[slot].store(hook);
    count.store(slot + 1);
  }
  void run() const {
    const size_t n = count.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) hooks[i].load(std::memory_order_relaxed)();
  }
};

// Constant-initialized, so registrations from other files' static initializers find them.
constinit Hooks g_outermost_op;
constinit Hooks g_step_cut;

}  // namespace

void add_outermost_op_hook(FrontEndHook hook) {
  g_outermost_op.add(hook, "add_outermost_op_hook");
}

void add_step_cut_hook(FrontEndHook hook) {
  g_step_cut.add(hook, "add_step_cut_hook");
}

void run_outermost_op_hooks() {
  g_outermost_op.run();
}

void run_step_cut_hooks() {
  g_step_cut.run();
}

}  // namespace lt::runtime
