#pragma once
// The Python extension lazytensor._C, bound with nanobind: one function per part of the API.
#include <nanobind/nanobind.h>

namespace lt_python {

void bind_tensor(nanobind::module_& m);       // lt.Tensor, dtypes, factories, functional ops
void bind_runtime(nanobind::module_& m);      // mark_step, scalar policies, metrics, memory
void bind_nn(nanobind::module_& m);           // optimizers, schedules, gradient clipping
void bind_data(nanobind::module_& m);         // tokenizer, MLM batches, safetensors files
void bind_distributed(nanobind::module_& m);  // lt.distributed: MPI process group, collectives

}  // namespace lt_python
