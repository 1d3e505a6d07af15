// The runtime: cutting and waiting for steps, scalar policies, compile settings, metrics and
// memory. Waits release the GIL, so other Python threads (a data loader) run meanwhile.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>

#include "bindings.h"
#include "lazytensor/device.h"
#include "lazytensor/metrics.h"
#include "lazytensor/runtime.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace lt_python {

namespace {

// A Python callable kept by the engine, which may let go of it, or call it, on a thread that
// does not hold the GIL.
std::shared_ptr<nb::callable> held_by_engine(nb::callable callable) {
  return std::shared_ptr<nb::callable>(new nb::callable(std::move(callable)),
                                       [](nb::callable* held) {
                                         nb::gil_scoped_acquire gil;
                                         delete held;
                                       });
}

}  // namespace

void bind_runtime(nb::module_& m) {
  m.def("mark_step", &lt::mark_step, nb::call_guard<nb::gil_scoped_release>(),
        "Cuts the traced graph and launches it (compiling it the first time it is seen)");
  m.def("wait_device_ops", &lt::wait_device_ops, nb::call_guard<nb::gil_scoped_release>(),
        "Waits until every launched step has finished; raises the first failure");
  m.def("set_front_end", &lt::set_front_end, "language"_a,
        "The language of hints in errors and warnings: \"python\" (set on import) or \"c++\"");
  m.def("front_end", &lt::front_end);
  m.def(
      "set_trace_location_provider",
      [](nb::callable provider) {
        lt::set_trace_location_provider([held = held_by_engine(std::move(provider))]() {
          nb::gil_scoped_acquire gil;
          try {
            return nb::cast<std::string>((*held)());
          } catch (nb::python_error& e) {
            e.discard_as_unraisable("lazytensor.set_trace_location_provider");
            return std::string();
          }
        });
      },
      "provider"_a,
      "A callable giving where an op is being traced (\"train.py:42\"), asked per op under "
      "LT_DEBUG; the package sets one");
  m.def(
      "on_step_failure",
      [](nb::callable undo) {
        lt::on_step_failure([held = held_by_engine(std::move(undo))] {
          nb::gil_scoped_acquire gil;
          try {
            (*held)();
          } catch (nb::python_error& e) {
            e.discard_as_unraisable("lazytensor.on_step_failure");
          }
        });
      },
      "undo"_a,
      "Registers how to put back host state that tracing this step changed, run if the step "
      "fails (when its error is raised)");
  m.def(
      "set_scalar_policy",
      [](const std::string& name) { lt::set_scalar_policy(lt::parse_scalar_policy(name)); },
      "policy"_a);
  m.def("scalar_policy", [] { return std::string(lt::scalar_policy_name(lt::scalar_policy())); });
  m.def("set_special_scalars", &lt::set_special_scalars, "enabled"_a);
  m.def("special_scalars", &lt::special_scalars);
  // Compilation and caches.
  m.def("set_kernel_compiler", &lt::set_kernel_compiler, "name"_a);
  m.def("kernel_compiler", &lt::kernel_compiler);
  m.def("matmul_library", &lt::matmul_library, "dtype"_a,
        "the library (and version) that runs matrix products of this dtype");
  m.def("matmul_isa", &lt::matmul_isa, "dtype"_a,
        "the instructions matrix products of this dtype run on: amx, avx512_bf16, avx512, avx2");
  m.def("kernel_isa", &lt::kernel_isa,
        "the instructions the generated kernels are compiled for: avx512, avx2, interpreter");
  m.def("set_tiered_compilation", &lt::set_tiered_compilation, "enabled"_a);
  m.def("tiered_compilation", &lt::tiered_compilation);
  m.def("wait_kernel_compiles", &lt::wait_kernel_compiles,
        nb::call_guard<nb::gil_scoped_release>());
  m.def("set_compile_cache_size", &lt::set_compile_cache_size, "graphs"_a);
  m.def("compile_cache_size", &lt::compile_cache_size);
  m.def("set_data_cache_size", &lt::set_data_cache_size, "entries"_a);
  m.def("set_num_threads", &lt::set_num_threads, "int"_a);
  // Device kinds and the default device by name (lt::device_kinds, LT_DEVICE).
  m.def("device_kinds", [] {
    nb::list kinds;
    for (const lt::DeviceKind& kind : lt::device_kinds()) {
      nb::dict d;
      d["name"] = kind.name;
      d["available"] = kind.available;
      d["reason"] = kind.reason;
      kinds.append(d);
    }
    return kinds;
  });
  m.def("_set_default_device", nb::overload_cast<const std::string&>(&lt::set_default_device),
        "device"_a);
  m.def("_default_device", [] { return lt::default_device().str(); });
  m.def("get_num_threads", &lt::get_num_threads);
  m.def("data_cache_size", &lt::data_cache_size);
  m.def("compile_cache_entries", &lt::compile_cache_entries);
  m.def("kernel_cache_entries", &lt::kernel_cache_entries);
  m.def("set_kernel_cache_dir", &lt::set_kernel_cache_dir, "path"_a);
  m.def("kernel_cache_dir", &lt::kernel_cache_dir);
  m.def("set_kernel_cache_bytes", &lt::set_kernel_cache_bytes, "bytes"_a);
  m.def("set_max_kernel_ops", &lt::set_max_kernel_ops, "ops"_a);
  m.def("set_row_groups", &lt::set_row_groups, "enabled"_a);
  m.def("row_groups", &lt::row_groups);
  m.def("set_symbolic_sizes", &lt::set_symbolic_sizes, "enabled"_a);
  m.def("symbolic_sizes", &lt::symbolic_sizes);
  // Graph size guards and debugging.
  m.def("set_graph_warn_nodes", &lt::set_graph_warn_nodes, "nodes"_a);
  m.def("set_auto_cut_nodes", &lt::set_auto_cut_nodes, "nodes"_a);
  m.def("set_debug", &lt::set_debug, "enabled"_a);
  m.def("debug", &lt::debug);
  m.def("set_device_memory_limit", &lt::set_device_memory_limit, "bytes"_a);
  m.def("last_recompile_reason", &lt::last_recompile_reason);
  m.def("compiles_per_step", &lt::compiles_per_step);
  m.def("clear_compile_caches", &lt::clear_compile_caches,
        nb::call_guard<nb::gil_scoped_release>());
  m.def("live_ir_nodes", &lt::live_ir_nodes);
  m.def("device_memory_stats", [] {
    const lt::DeviceMemoryStats s = lt::device_memory_stats();
    nb::dict d;
    d["bytes_in_use"] = s.bytes_in_use;
    d["peak_bytes"] = s.peak_bytes;
    d["allocations"] = s.allocations;
    return d;
  });
  m.def("reset_peak_device_memory", &lt::reset_peak_device_memory);
  m.def("last_step_stats", [] {
    const lt::StepStats s = lt::last_step_stats();
    nb::dict d;
    d["step"] = s.step;
    d["graph_nodes"] = s.graph_nodes;
    d["outputs"] = s.outputs;
    d["inputs"] = s.inputs;
    d["scalar_args"] = s.scalar_args;
    d["kernels"] = s.kernels;
    d["launches"] = s.launches;
    d["donated_buffers"] = s.donated_buffers;
    d["temporary_bytes"] = s.temporary_bytes;
    d["cache_hit"] = s.cache_hit;
    return d;
  });

  nb::module_ metrics = m.def_submodule("metrics", "Counters and timers of the engine");
  metrics.def("counter_value", &lt::metrics::counter_value, "name"_a);
  metrics.def("counter_names", &lt::metrics::counter_names);
  metrics.def("timer_names", &lt::metrics::timer_names);
  metrics.def(
      "timer_stats",
      [](const std::string& name) {
        const lt::metrics::TimerStats s = lt::metrics::timer_stats(name);
        nb::dict d;
        d["count"] = s.count;
        d["total_seconds"] = s.total_seconds;
        d["min_seconds"] = s.min_seconds;
        d["max_seconds"] = s.max_seconds;
        d["median_seconds"] = s.median_seconds;
        return d;
      },
      "name"_a);
  metrics.def("increment", &lt::metrics::increment, "name"_a, "delta"_a = 1);
  metrics.def("record_time", &lt::metrics::record_time, "name"_a, "seconds"_a);
  metrics.def("reset", &lt::metrics::reset);
  metrics.def("report", &lt::metrics::report);
  metrics.def("report_json", &lt::metrics::report_json);
}

}  // namespace lt_python
