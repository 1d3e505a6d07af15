#pragma once
// Where in the user's code each op was traced, kept under LT_DEBUG when a front end gives a
// provider (the Python package: the innermost frame outside the package, "train.py:42"), so
// that a recompile can name the line that made the op where two graphs differ.
#include <cstdint>
#include <string>

namespace lt::runtime {

// Called by the outermost TraceScope of an op: the op's nodes are the serials made between.
void begin_traced_op();
void end_traced_op();
// The location of the op that made the node with `serial`; empty if not known.
std::string trace_location_of(uint64_t serial);

}  // namespace lt::runtime
