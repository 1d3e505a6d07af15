#pragma once
// The runtime calls no front-end code by name: a front end (the Tensor API's tracer and
// autograd; later a PyTorch device) registers here the work it needs done at the runtime's
// moments. Registration happens during static initialization of the front end's files or
// later; the hooks run in the order registered.

namespace lt::runtime {

using FrontEndHook = void (*)();

// Runs as each outermost traced op begins, on the tracing thread (autograd forgets the
// operands it noted for the op before). It runs on every op: keep it a few instructions.
void add_outermost_op_hook(FrontEndHook hook);
// Runs first in each mark_step()'s cut, while no op on any thread can trace or read (autocast
// traces its kept copies' refresh into the step that updates their parameters).
void add_step_cut_hook(FrontEndHook hook);

void run_outermost_op_hooks();
void run_step_cut_hooks();

}  // namespace lt::runtime
