#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lt {

// Element types. Only f32 and f64 have kernels today; the others are reserved so that
// adding them does not change the enum's layout or the graph hashes of existing programs.
enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, boolean };

const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);
bool dtype_has_kernels(DType dtype);
// The dtype of an op over a and b, following PyTorch's promotion for floating types.
DType promote_types(DType a, DType b);

}  // namespace lt
