#include <nanobind/nanobind.h>

#include "bindings.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"

NB_MODULE(_C, m) {
  m.doc() = "lazytensor's engine: the C++ tensors, ops and runtime that the package wraps";
  // lt::Error becomes lazytensor.Error, a RuntimeError carrying the engine's message, and
  // lt::IndexError lazytensor.IndexError, both a lazytensor.Error and a builtin IndexError (as
  // PyTorch raises for an embedding id out of range). Registered after Error's, so it is
  // tried first.
  nanobind::exception<lt::Error> error(m, "Error", PyExc_RuntimeError);
  PyObject* index_error = PyErr_NewExceptionWithDoc(
      "lazytensor._C.IndexError", "An index out of range: a lazytensor.Error and an IndexError",
      nanobind::make_tuple(error, nanobind::handle(PyExc_IndexError)).ptr(), nullptr);
  m.attr("IndexError") = nanobind::steal(index_error);
  nanobind::register_exception_translator(
      [](const std::exception_ptr& p, void* type) {
        try {
          std::rethrow_exception(p);
        } catch (const lt::IndexError& e) {
          PyErr_SetString(static_cast<PyObject*>(type), e.what());
        }
      },
      index_error);
  // Hints in errors and warnings name Python's spelling (lazytensor.no_grad()).
  lt::set_front_end("python");
  lt_python::bind_tensor(m);
  lt_python::bind_runtime(m);
  lt_python::bind_nn(m);
  lt_python::bind_data(m);
  lt_python::bind_distributed(m);
}
