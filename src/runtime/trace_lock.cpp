#include "runtime/trace_lock.h"

#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

#include "ir/node.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "runtime/config.h"
#include "runtime/front_end_hooks.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_locations.h"

namespace lt::runtime {

namespace {

// A reader-writer lock that lets a waiting writer in: readers (ops) come and go all the
// time, and a cut must not starve behind them. Readers cost one atomic add and one subtract.
class TraceLock {
 public:
  void lock_shared() {
    for (;;) {
      if (!(state_.fetch_add(1, std::memory_order_acquire) & kWriter)) return;
      unlock_shared();  // a cut is waiting or running: step back until it is done
      for (uint32_t s; (s = state_.load(std::memory_order_acquire)) & kWriter;) state_.wait(s);
    }
  }
  void unlock_shared() {
    if (state_.fetch_sub(1, std::memory_order_release) == (kWriter | 1)) state_.notify_all();
  }
  void lock() {
    writers_.lock();
    state_.fetch_or(kWriter, std::memory_order_acquire);
    for (uint32_t s; (s = state_.load(std::memory_order_acquire)) != kWriter;) state_.wait(s);
  }
  void unlock() {
    state_.fetch_and(~kWriter, std::memory_order_release);
    state_.notify_all();
    writers_.unlock();
  }

 private:
  static constexpr uint32_t kWriter = uint32_t{1} << 31;
  std::atomic<uint32_t> state_{0};  // kWriter | number of readers inside or stepping in
  std::mutex writers_;
};

TraceLock& trace_lock() {
  static TraceLock* lock = new TraceLock();  // never destroyed: tensors die at exit too
  return *lock;
}

thread_local int t_trace_depth = 0;
thread_local bool t_cutting = false;

std::atomic<bool> g_warned{false};
std::atomic<int64_t> g_next_cut{0};  // raised when a cut could not bring the graph down

void warn_graph_growth(int64_t nodes, const char* op) {
  if (g_warned.exchange(true)) return;
  uint32_t deepest = 0;
  size_t pending = 0;
  {
    // Other threads' tensors are read under a cut: an op or a cut there may rebind them.
    const CutScope cut("graph-growth warning");
    for (const auto& impl : pending_tensors()) {
      ++pending;
      if (impl->ir) deepest = std::max(deepest, impl->ir->depth);
    }
  }
  const char* mark_step = in_callers_words("lt::mark_step()", "lazytensor.mark_step()");
  std::fprintf(stderr,
               "lazytensor: warning: %lld IR nodes are alive and no %s has cut them (noticed "
               "when tracing '%s'); the longest pending chain is %u ops. Call %s once per "
               "iteration (after the optimizer step). Past LT_AUTO_CUT_NODES (now %zu; 0: "
               "never) the graph is cut automatically.%s\n",
               static_cast<long long>(nodes), mark_step, op, deepest, mark_step,
               config().auto_cut_nodes.load(), config().debug ? "" : " LT_DEBUG=1 tells more.");
  if (config().debug) {
    std::fprintf(stderr,
                 "lazytensor: %zu tensors are pending. A loop that traces into the same tensor "
                 "(x = x.add(1.0)) without a cut grows the chain by one op per iteration; "
                 "LT_GRAPH_WARN_NODES sets this warning's threshold. Where '%s' was traced "
                 "(resolve with addr2line, or link with -rdynamic for names):\n",
                 pending, op);
    void* frames[32];
    backtrace_symbols_fd(frames, backtrace(frames, 32), 2);
  }
}

void check_graph_growth(const char* op) {
  const int64_t nodes = ir::live_nodes();
  const auto warn_at = static_cast<int64_t>(config().graph_warn_nodes.load());
  if (warn_at > 0 && nodes > warn_at) warn_graph_growth(nodes, op);
  const auto cut_at = static_cast<int64_t>(config().auto_cut_nodes.load());
  if (cut_at <= 0 || nodes <= std::max(cut_at, g_next_cut.load())) return;
  mark_step();
  // Nodes a cut cannot free (held outside pending tensors) must not make every op cut.
  const int64_t left = ir::live_nodes();
  g_next_cut.store(left > cut_at / 2 ? left + cut_at : 0);
}

}  // namespace

void rearm_graph_growth_warning() {
  g_warned = false;
}

TraceScope::TraceScope(const char* op, Purpose purpose) {
  if (t_cutting) {
    throw Error(std::string(op) + ": an op cannot be traced inside a graph cut");
  }
  if (t_trace_depth > 0) {
    ++t_trace_depth;  // nested in an op: the lock is held already
    return;
  }
  if (purpose == Purpose::trace) check_graph_growth(op);
  run_outermost_op_hooks();
  trace_lock().lock_shared();
  ++t_trace_depth;
  if (purpose == Purpose::trace) begin_traced_op();
}

TraceScope::~TraceScope() {
  if (--t_trace_depth > 0) return;
  end_traced_op();
  trace_lock().unlock_shared();
}

CutScope::CutScope(const char* op) {
  if (t_cutting) throw Error(std::string(op) + ": a graph cut is already running on this thread");
  if (t_trace_depth > 0) {
    throw Error(std::string(op) +
                ": cannot cut the graph from inside an op on the same thread (it would wait "
                "for itself)");
  }
  trace_lock().lock();
  t_cutting = true;
}

CutScope::~CutScope() {
  t_cutting = false;
  trace_lock().unlock();
}

}  // namespace lt::runtime
