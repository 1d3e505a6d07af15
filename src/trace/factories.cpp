// Tensor factories: uploads (asynchronous) and fills (traced like any op).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numbers>
#include <string>
#include <thread>
#include <vector>

#include "ir/dtype_traits.h"
#include "lazytensor/error.h"
#include "lazytensor/runtime.h"
#include "lazytensor/tensor.h"
#include "runtime/device.h"
#include "runtime/tensor_impl.h"
#include "runtime/trace_lock.h"
#include "trace/trace.h"
#include "util/counter_uniform.h"

namespace lt {

namespace {

// A tensor holding `data` as its value.
Tensor tensor_over(runtime::DeviceDataPtr data) {
  auto impl = std::make_shared<TensorImpl>(data->shape, data->dtype, data->device);
  impl->set_data(std::move(data));
  return Tensor(std::move(impl));
}

// Uploads shape.numel() elements of `dtype` from `values` to the default device.
Tensor upload(const void* values, const Shape& shape, DType dtype) {
  const Device device = default_device();
  runtime::DeviceDataPtr data;
  if (dtype == DType::boolean) {
    // Kernels read bools as C++ bools, which must be 0 or 1: other bytes mean true.
    const size_t bytes = static_cast<size_t>(shape.numel());
    std::unique_ptr<unsigned char[]> normalized(new unsigned char[bytes]);
    const auto* in = static_cast<const unsigned char*>(values);
    for (size_t i = 0; i < bytes; ++i) normalized[i] = in[i] != 0;
    data = runtime::upload(normalized.get(), shape, dtype, device);
  } else {
    data = runtime::upload(values, shape, dtype, device);
  }
  return tensor_over(std::move(data));
}

// Runs fill(begin, end) over [0, n) in contiguous slices, one per engine thread
// (lt::get_num_threads) when n is large: BERT-base's random initialization is 110M draws
// (Box-Muller: a logarithm and a cosine each), 3 seconds on one core. Each value depends on its
// index alone, so slicing changes nothing.
void fill_in_slices(int64_t n, const std::function<void(int64_t, int64_t)>& fill) {
  constexpr int64_t kMinSlice = int64_t{1} << 17;
  const int64_t slices = std::clamp<int64_t>(n / kMinSlice, 1, get_num_threads());
  std::vector<std::thread> helpers;
  const int64_t per_slice = (n + slices - 1) / slices;
  for (int64_t s = 1; s < slices; ++s) {
    helpers.emplace_back(fill, s * per_slice, std::min(n, (s + 1) * per_slice));
  }
  fill(0, std::min(n, per_slice));
  for (std::thread& helper : helpers) helper.join();
}

Tensor random(const char* op, const Shape& shape, uint64_t seed, DType dtype, bool normal) {
  trace::check_dtype(op, dtype);
  if (!dtype_is_floating(dtype)) {
    throw Error(std::string(op) + ": random values need a floating dtype, not " +
                dtype_name(dtype));
  }
  trace::check_shape(op, shape);
  const int64_t n = shape.numel();
  const auto fill = [&](void* destination) {
    visit_dtype(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* elements = static_cast<T*>(destination);
      fill_in_slices(n, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          double value;
          if (normal) {  // Box-Muller over two independent uniforms
            const double u1 = 1.0 - detail::counter_uniform(seed, 2 * i),
                         u2 = detail::counter_uniform(seed, 2 * i + 1);
            value = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
          } else {
            value = detail::counter_uniform(seed, i);
          }
          elements[i] = convert_element<T>(value);
        }
      });
    });
  };
  return tensor_over(runtime::fill_from_host(shape, dtype, default_device(), fill));
}

Tensor filled(const char* op, const Shape& shape, double value, DType dtype) {
  const runtime::TraceScope scope(op);
  trace::check_dtype(op, dtype);
  trace::check_shape(op, shape);
  const Device device = default_device();
  return trace::make_tensor(trace::expand(op, trace::scalar(value, dtype, device), shape, device));
}

}  // namespace

namespace detail {

Tensor from_values(const char* op, const void* values, size_t count, const Shape& shape,
                   DType dtype) {
  trace::check_dtype(op, dtype);
  trace::check_shape(op, shape);
  if (static_cast<int64_t>(count) != shape.numel()) {
    throw Error(std::string(op) + ": shape " + shape.str() + " has " +
                std::to_string(shape.numel()) + " elements but " + std::to_string(count) +
                " values were given");
  }
  return upload(values, shape, dtype);
}

}  // namespace detail

Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
  return detail::from_values("from_vector", values.data(), values.size(), shape, dtype_of<float>());
}
Tensor from_vector(const std::vector<double>& values, const Shape& shape) {
  return detail::from_values("from_vector", values.data(), values.size(), shape,
                             dtype_of<double>());
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape) {
  return detail::from_values("from_vector", values.data(), values.size(), shape,
                             dtype_of<int64_t>());
}
Tensor from_vector(const std::vector<int32_t>& values, const Shape& shape) {
  return detail::from_values("from_vector", values.data(), values.size(), shape,
                             dtype_of<int32_t>());
}

Tensor from_host(const void* data, const Shape& shape, DType dtype) {
  trace::check_dtype("from_host", dtype);
  trace::check_shape("from_host", shape);
  if (data == nullptr && shape.numel() > 0) {
    throw Error("from_host: data is null for shape " + shape.str() + " (" +
                std::to_string(shape.numel()) + " elements of " + dtype_name(dtype) + ")");
  }
  return upload(data, shape, dtype);
}

Tensor from_external(const void* data, const Shape& shape, DType dtype,
                     std::function<void()> release) {
  trace::check_dtype("from_external", dtype);
  trace::check_shape("from_external", shape);
  const Device device = default_device();
  if (!runtime::host_addressable(device)) {
    throw Error("from_external: the default device " + device.str() +
                " cannot read host memory in place");
  }
  if (data == nullptr && shape.numel() > 0) {
    throw Error("from_external: data is null for shape " + shape.str());
  }
  return tensor_over(runtime::wrap_external(data, shape, dtype, device, std::move(release)));
}

Tensor full(const Shape& shape, double value, DType dtype) {
  return filled("full", shape, value, dtype);
}
Tensor zeros(const Shape& shape, DType dtype) {
  return filled("zeros", shape, 0.0, dtype);
}
Tensor zeros_like(const Tensor& t) {
  if (!t.defined()) throw Error("zeros_like: the tensor is undefined");
  const DeviceGuard on(t.device());
  return filled("zeros_like", t.shape(), 0.0, t.dtype());
}
Tensor ones(const Shape& shape, DType dtype) {
  return filled("ones", shape, 1.0, dtype);
}

Tensor rand(const Shape& shape, uint64_t seed, DType dtype) {
  return random("rand", shape, seed, dtype, false);
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  return random("randn", shape, seed, dtype, true);
}

}  // namespace lt
