#include <nanobind/nanobind.h>

#include "bindings.h"
#include "lazytensor/error.h"

NB_MODULE(_C, m) {
  m.doc() = "lazytensor's engine: the C++ tensors, ops and runtime that the package wraps";
  // lt::Error becomes lazytensor.Error, a RuntimeError carrying the engine's message.
  nanobind::exception<lt::Error>(m, "Error", PyExc_RuntimeError);
  lt_python::bind_tensor(m);
  lt_python::bind_runtime(m);
  lt_python::bind_nn(m);
  lt_python::bind_data(m);
  lt_python::bind_distributed(m);
}
