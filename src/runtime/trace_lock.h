#pragma once
// Tracing and graph cuts exclude each other. A cut (mark_step, or the sync before a read)
// takes every pending tensor, rebinds it to device data and may hand an input's buffer to an
// output (donation). An op traced on another thread at that moment could read a tensor's old
// value after its buffer was donated and compute with overwritten data. So every op holds the
// trace lock shared for its whole body, and a cut holds it exclusively: an op happens wholly
// before a cut or wholly after it. Ops on different threads still run concurrently.

namespace lt::runtime {

// Held by a Tensor op (or factory) `op` while it reads tensors and records IR. Re-entrant on
// one thread; an op cannot run inside a cut (lt::Error). Before the outermost one locks, the
// graph-growth checks run (a warning once, naming `op`, and an automatic cut past
// LT_AUTO_CUT_NODES).
class TraceScope {
 public:
  // What the holder does: trace an op (the growth checks run first), or only read a tensor's
  // current value (a read never cuts the graph, so is_pending() is not answered by its own cut).
  enum class Purpose { trace, read };
  explicit TraceScope(const char* op, Purpose purpose = Purpose::trace);
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;
};

// Lets the graph-growth warning be given once more (a new threshold was set).
void rearm_graph_growth_warning();

// Held by a graph cut. Throws lt::Error naming `op` when this thread is inside an op (it
// would wait for itself).
class CutScope {
 public:
  explicit CutScope(const char* op);
  ~CutScope();
  CutScope(const CutScope&) = delete;
  CutScope& operator=(const CutScope&) = delete;
};

}  // namespace lt::runtime
