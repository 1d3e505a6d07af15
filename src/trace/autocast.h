#pragma once
// Autocast's side of tracing (lazytensor/autocast.h): which products autocast, the bf16
// copies of their operands, and the refresh of parameters' kept copies at mark_step.
#include "ir/node.h"
#include "lazytensor/tensor.h"

namespace lt::trace {

// True when autocast is on for this thread and both operands are f32 or bf16.
bool autocasts(const ir::NodePtr& a, const ir::NodePtr& b);
// x rounded to bf16 (no grad recorded); a view of a whole base is cast as its base and viewed
// again, so that the cast fuses into the kernel that computes the base.
Tensor bf16_copy(const Tensor& x);
// x as a product's operand under autocast: x itself when bf16, else its bf16 copy, kept with
// x and made now if missing or stale (x written since). Records no grad.
Tensor autocast_operand(const Tensor& x);
// x's kept bf16 copy (x f32), made now if missing or stale; `read`: a product reads it (a
// parameter's copy not read between two writes is dropped at mark_step).
Tensor kept_copy(const Tensor& x, bool read);
// Inside a mark_step's cut (the trace lock held exclusively), before the graph is taken: the
// kept copies of parameters written since their cast, and read since, are cast again in the
// graph about to be cut; other copies of tensors written since their cast are dropped.
void refresh_autocast_copies();

}  // namespace lt::trace
