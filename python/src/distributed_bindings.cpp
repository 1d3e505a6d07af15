// Data parallelism over MPI (lt.distributed): the process group, the collectives and gradient
// averaging, as lazytensor/distributed.h has them. Under `mpirun -np N python script.py`.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "lazytensor/distributed.h"
#include "lazytensor/error.h"

namespace nb = nanobind;
using namespace nb::literals;
namespace dist = lt::distributed;

namespace lt_python {

namespace {

// torch.distributed's names: ReduceOp.SUM, AVG, MAX, as the strings "sum", "mean" ("avg"), "max".
dist::ReduceOp reduce_op(const std::string& name) {
  if (name == "sum") return dist::ReduceOp::sum;
  if (name == "mean" || name == "avg") return dist::ReduceOp::mean;
  if (name == "max") return dist::ReduceOp::max;
  throw lt::Error("lt.distributed: unknown reduce op '" + name + "' (sum, mean or max)");
}

}  // namespace

void bind_distributed(nb::module_& m) {
  nb::module_ d = m.def_submodule("distributed",
                                  "Data parallelism over MPI: run the script under mpirun -np N");
  d.def("init", &dist::init, "Joins the world mpirun started (alone: a world of one)");
  d.def("finalize", &dist::finalize, nb::call_guard<nb::gil_scoped_release>());
  d.def("available", &dist::available, "Whether this build has MPI");
  d.def("rank", &dist::rank);
  d.def("world_size", &dist::world_size);
  d.def("barrier", &dist::barrier, nb::call_guard<nb::gil_scoped_release>());
  d.def(
      "all_reduce",
      [](const lt::Tensor& t, const std::string& op) { return dist::all_reduce(t, reduce_op(op)); },
      "tensor"_a, "op"_a = "sum");
  d.def("all_gather", &dist::all_gather, "tensor"_a);
  d.def(
      "reduce_scatter",
      [](const lt::Tensor& t, const std::string& op) {
        return dist::reduce_scatter(t, reduce_op(op));
      },
      "tensor"_a, "op"_a = "sum");
  d.def("broadcast", &dist::broadcast, "tensor"_a, "root"_a = 0);
  d.def(
      "all_reduce_coalesced",
      [](std::vector<lt::Tensor> tensors, const std::string& op, size_t bucket_bytes) {
        dist::all_reduce_coalesced(tensors, reduce_op(op), bucket_bytes);
        return tensors;
      },
      "tensors"_a, "op"_a = "mean", "bucket_bytes"_a = size_t{25} << 20,
      "The tensors all-reduced in buckets: new tensors, in order");
  d.def("average_gradients", &dist::average_gradients, "params"_a,
        "bucket_bytes"_a = size_t{25} << 20,
        "Every parameter's .grad becomes the mean of the ranks' (before the optimizer)");
}

}  // namespace lt_python
