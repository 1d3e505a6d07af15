// Tensor factories: uploads (asynchronous) and fills (traced like any op).
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "lazytensor/error.h"
#include "lazytensor/tensor.h"
#include "runtime/tensor_impl.h"
#include "trace/trace.h"

namespace lt {

namespace {

template <class T>
Tensor upload(const char* op, const T* values, size_t count, const Shape& shape, DType dtype) {
  trace::check_shape(op, shape);
  if (static_cast<int64_t>(count) != shape.numel()) {
    throw Error(std::string(op) + ": shape " + shape.str() + " has " +
                std::to_string(shape.numel()) + " elements but " + std::to_string(count) +
                " values were given");
  }
  backend::Backend& device = backend::default_backend();
  auto buffer = device.allocate(count * sizeof(T));
  device.transfer_to_device(buffer, values, count * sizeof(T), /*synchronous=*/false);
  auto impl = std::make_shared<TensorImpl>(shape, dtype);
  impl->set_data(std::make_shared<runtime::DeviceData>(shape, dtype, std::move(buffer)));
  return Tensor(std::move(impl));
}

// Counter-based generator (SplitMix64): value i depends only on (seed, i), so the same seed
// gives the same tensor whatever else ran before.
double uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

Tensor random(const char* op, const Shape& shape, uint64_t seed, DType dtype, bool normal) {
  trace::check_dtype(op, dtype);
  trace::check_shape(op, shape);
  const int64_t n = shape.numel();
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) {
    if (normal) {  // Box-Muller over two independent uniforms
      const double u1 = 1.0 - uniform(seed, 2 * i), u2 = uniform(seed, 2 * i + 1);
      values[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
    } else {
      values[i] = uniform(seed, i);
    }
  }
  if (dtype == DType::f64) return upload(op, values.data(), n, shape, dtype);
  std::vector<float> narrow(values.begin(), values.end());
  return upload(op, narrow.data(), n, shape, dtype);
}

Tensor filled(const char* op, const Shape& shape, double value, DType dtype) {
  trace::check_dtype(op, dtype);
  trace::check_shape(op, shape);
  return trace::make_tensor(trace::expand(op, trace::scalar(value, dtype), shape));
}

}  // namespace

Tensor from_vector(const std::vector<float>& values, const Shape& shape) {
  return upload("from_vector", values.data(), values.size(), shape, DType::f32);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape) {
  return upload("from_vector", values.data(), values.size(), shape, DType::f64);
}

Tensor full(const Shape& shape, double value, DType dtype) {
  return filled("full", shape, value, dtype);
}
Tensor zeros(const Shape& shape, DType dtype) {
  return filled("zeros", shape, 0.0, dtype);
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
