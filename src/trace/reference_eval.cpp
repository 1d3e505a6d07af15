// lt::reference::evaluate: the tensor's current value as a graph, its leaves read from the
// device here, then ir::evaluate_graph. Reading device memory stays out of the IR, which only
// computes on the values it is handed.
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "ir/dtype_traits.h"
#include "ir/reference_evaluator.h"
#include "lazytensor/error.h"
#include "lazytensor/reference.h"
#include "runtime/device.h"
#include "runtime/device_data.h"
#include "runtime/graph_signature.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"

namespace lt::reference {

namespace {

// An element as stored, read without the kernels' conversions (the reference shares nothing
// with them): bf16 is the upper half of an f32's bits; f16 is IEEE binary16.
template <class T>
double value_of(T element) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return std::bit_cast<float>(static_cast<uint32_t>(element.bits) << 16);
  } else if constexpr (std::is_same_v<T, Float16>) {
    const int exponent = (element.bits >> 10) & 0x1f;
    const int fraction = element.bits & 0x3ff;
    const double sign = element.bits & 0x8000 ? -1.0 : 1.0;
    if (exponent == 0x1f) return fraction ? std::nan("") : sign * HUGE_VAL;
    if (exponent == 0) return sign * std::ldexp(fraction, -24);
    return sign * std::ldexp(1.0 + fraction / 1024.0, exponent - 15);
  } else {
    return static_cast<double>(element);
  }
}

// The values of device data, waiting for the device to have written them.
std::vector<double> read_values(const runtime::DeviceData& data) {
  const int64_t n = data.shape.numel();
  return visit_dtype(data.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::unique_ptr<T[]> host(new T[n]);
    runtime::download(data, host.get());
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = value_of(host[i]);
    return out;
  });
}

}  // namespace

std::vector<double> evaluate(const Tensor& tensor) {
  if (!tensor.defined()) throw Error("reference::evaluate: the tensor is undefined");
  // Traced values are read as an op reads them; no cut may donate a leaf's buffer meanwhile.
  const runtime::TraceScope scope("reference::evaluate", runtime::TraceScope::Purpose::read);
  // Held for the whole evaluation: the graph's nodes stay alive even if the tensor is rebound.
  const ir::NodePtr root = tensor.impl()->value();
  ir::Graph graph;
  runtime::GraphSignature signature;  // not needed here, but build_graph fills both in one walk
  std::vector<uint32_t> root_outputs;
  runtime::build_graph({root.get()}, 0, graph, signature, root_outputs);
  std::vector<std::vector<double>> inputs;
  inputs.reserve(graph.inputs.size());
  for (uint32_t index : graph.inputs) inputs.push_back(read_values(*graph.node(index).data));
  return std::move(ir::evaluate_graph(graph, inputs)[root_outputs[0]]);
}

}  // namespace lt::reference
