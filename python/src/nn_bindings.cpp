// Optimizers, learning-rate schedules and gradient clipping over the engine's C++ classes: the
// Python layer (lazytensor/optim.py) gives them torch.optim's constructors.
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "lazytensor/error.h"
#include "lazytensor/optim.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace lt_python {

namespace {

using lt::Tensor;
using lt::optim::AdamWOptions;
using lt::optim::ParamGroup;
using lt::optim::SGDOptions;

template <class Options>
std::vector<ParamGroup<Options>> groups_of(
    std::vector<std::pair<std::vector<Tensor>, Options>> groups) {
  std::vector<ParamGroup<Options>> out;
  for (auto& [params, options] : groups) out.push_back({std::move(params), {}, options});
  return out;
}

lt::optim::AdamW::Flavor flavor_of(const std::string& name) {
  if (name == "torch") return lt::optim::AdamW::Flavor::torch;
  if (name == "huggingface") return lt::optim::AdamW::Flavor::huggingface;
  throw lt::Error("AdamW: flavor must be 'torch' or 'huggingface', got '" + name + "'");
}

}  // namespace

void bind_nn(nb::module_& m) {
  nb::class_<AdamWOptions>(m, "AdamWOptions")
      .def(nb::init<>())
      .def_rw("lr", &AdamWOptions::lr)
      .def_rw("beta1", &AdamWOptions::beta1)
      .def_rw("beta2", &AdamWOptions::beta2)
      .def_rw("eps", &AdamWOptions::eps)
      .def_rw("weight_decay", &AdamWOptions::weight_decay)
      .def_rw("correct_bias", &AdamWOptions::correct_bias)
      .def_rw("amsgrad", &AdamWOptions::amsgrad)
      .def_prop_rw(
          "precision",
          [](const AdamWOptions& o) { return std::string(lt::optim::precision_name(o.precision)); },
          [](AdamWOptions& o, const std::string& name) {
            o.precision = lt::optim::parse_precision(name);
          });
  nb::class_<lt::optim::AdamW>(m, "AdamW")
      .def(
          "__init__",
          [](lt::optim::AdamW* self,
             std::vector<std::pair<std::vector<Tensor>, AdamWOptions>> groups,
             const std::string& flavor) {
            new (self) lt::optim::AdamW(groups_of(std::move(groups)), flavor_of(flavor));
          },
          "groups"_a, "flavor"_a)
      .def("step", &lt::optim::AdamW::step)
      .def("zero_grad", &lt::optim::AdamW::zero_grad, "set_to_none"_a = true)
      .def("set_lr", &lt::optim::AdamW::set_lr, "lr"_a)
      .def(
          "group_options",
          [](const lt::optim::AdamW& o, size_t g) { return o.groups().at(g).options; }, "group"_a)
      .def(
          "set_group_options",
          [](lt::optim::AdamW& o, size_t g, const AdamWOptions& options) {
            o.groups().at(g).options = options;
          },
          "group"_a, "options"_a)
      .def(
          "state",
          [](const lt::optim::AdamW& o, size_t group, size_t param) {
            const lt::optim::AdamW::State& s = o.state(group, param);
            nb::dict d;
            d["step"] = s.step;
            d["exp_avg"] = s.exp_avg;
            d["exp_avg_sq"] = s.exp_avg_sq;
            if (s.max_exp_avg_sq.defined()) d["max_exp_avg_sq"] = s.max_exp_avg_sq;
            if (s.master.defined()) d["master"] = s.master;
            if (s.exp_avg_absmax.defined()) {
              d["exp_avg_absmax"] = s.exp_avg_absmax;
              d["exp_avg_sq_absmax"] = s.exp_avg_sq_absmax;
            }
            return d;
          },
          "group"_a, "param"_a)
      .def(
          "load_state",
          [](lt::optim::AdamW& o, size_t group, size_t param, int64_t step,
             const std::map<std::string, Tensor>& tensors) {
            lt::optim::AdamW::State& s = o.mutable_state(group, param);
            const std::pair<const char*, Tensor*> slots[] = {
                {"exp_avg", &s.exp_avg},
                {"exp_avg_sq", &s.exp_avg_sq},
                {"max_exp_avg_sq", &s.max_exp_avg_sq},
                {"master", &s.master},
                {"exp_avg_absmax", &s.exp_avg_absmax},
                {"exp_avg_sq_absmax", &s.exp_avg_sq_absmax}};
            // Every tensor checked before any is written: a state that does not fit changes
            // nothing.
            for (const auto& [name, slot] : slots) {
              const auto it = tensors.find(name);
              if (slot->defined() != (it != tensors.end())) {
                throw lt::Error(std::string("AdamW.load_state_dict: parameter ") +
                                std::to_string(param) + " of group " + std::to_string(group) +
                                (slot->defined() ? " needs '" : " has no '") + name +
                                "' in this optimizer's precision and options");
              }
              if (slot->defined() &&
                  (it->second.shape() != slot->shape() || it->second.dtype() != slot->dtype())) {
                throw lt::Error(std::string("AdamW.load_state_dict: '") + name + "' of parameter " +
                                std::to_string(param) + " is " + it->second.shape().str() + " " +
                                lt::dtype_name(it->second.dtype()) + ", the optimizer's is " +
                                slot->shape().str() + " " + lt::dtype_name(slot->dtype()));
              }
            }
            for (const auto& [name, slot] : slots) {
              if (slot->defined()) slot->copy_(tensors.at(name));
            }
            s.step = step;
          },
          "group"_a, "param"_a, "step"_a, "tensors"_a);

  nb::class_<SGDOptions>(m, "SGDOptions")
      .def(nb::init<>())
      .def_rw("lr", &SGDOptions::lr)
      .def_rw("momentum", &SGDOptions::momentum)
      .def_rw("dampening", &SGDOptions::dampening)
      .def_rw("weight_decay", &SGDOptions::weight_decay)
      .def_rw("nesterov", &SGDOptions::nesterov);
  nb::class_<lt::optim::SGD>(m, "SGD")
      .def(
          "__init__",
          [](lt::optim::SGD* self, std::vector<std::pair<std::vector<Tensor>, SGDOptions>> groups) {
            new (self) lt::optim::SGD(groups_of(std::move(groups)));
          },
          "groups"_a)
      .def("step", &lt::optim::SGD::step)
      .def("zero_grad", &lt::optim::SGD::zero_grad, "set_to_none"_a = true)
      .def("set_lr", &lt::optim::SGD::set_lr, "lr"_a)
      .def(
          "set_group_options",
          [](lt::optim::SGD& o, size_t g, const SGDOptions& options) {
            o.groups().at(g).options = options;
          },
          "group"_a, "options"_a)
      .def(
          "state",
          [](const lt::optim::SGD& o, size_t group, size_t param) {
            const lt::optim::SGD::State& s = o.state(group, param);
            nb::dict d;
            d["step"] = s.step;
            if (s.momentum_buffer.defined()) d["momentum_buffer"] = s.momentum_buffer;
            return d;
          },
          "group"_a, "param"_a)
      // Python's load_state_dict has checked the names, shapes and dtypes of every parameter's
      // tensors before the first of these calls.
      .def(
          "load_state",
          [](lt::optim::SGD& o, size_t group, size_t param, int64_t step,
             const std::map<std::string, Tensor>& tensors) {
            lt::optim::SGD::State& s = o.mutable_state(group, param);
            if (const auto it = tensors.find("momentum_buffer"); it != tensors.end()) {
              s.momentum_buffer.copy_(it->second);
            }
            s.step = step;
          },
          "group"_a, "param"_a, "step"_a, "tensors"_a);

  nb::class_<lt::optim::Schedule>(m, "Schedule")
      .def("factor", &lt::optim::Schedule::factor, "step"_a)
      .def("lr", &lt::optim::Schedule::lr, "base_lr"_a, "step"_a);
  m.def("constant_schedule", &lt::optim::constant_schedule);
  m.def("linear_schedule", &lt::optim::linear_schedule, "warmup_steps"_a, "total_steps"_a);
  m.def("cosine_schedule", &lt::optim::cosine_schedule, "warmup_steps"_a, "total_steps"_a,
        "num_cycles"_a = 0.5);
  m.def("make_schedule", &lt::optim::make_schedule, "name"_a, "warmup_steps"_a, "total_steps"_a);

  m.def(
      "clip_grad_norm_",
      [](std::vector<Tensor> grads, double max_norm) {
        return lt::clip_grad_norm_(grads, max_norm);
      },
      "grads"_a, "max_norm"_a);
}

}  // namespace lt_python
