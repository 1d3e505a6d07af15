#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace lt {

// Element types. The enum's values are part of the graph hashes of existing programs, so new
// dtypes go at the end.
//
// Every dtype can be created, read back, copied and cast (`Tensor::to`, `copy_`). Arithmetic
// and reductions take the floating dtypes, f32, f64, bf16 (stored as the upper 16 bits of an
// f32) and f16 (IEEE binary16), and the integers i32 and i64. The two 16-bit floating ones
// compute each op in f32 and round its result to nearest even, as PyTorch does, keeping NaN a
// NaN. Integers wrap on overflow; ops that PyTorch defines on floating values only (exp, true
// division) take integer and bool operands as f32, as PyTorch promotes them. bool has the
// comparisons, where, and the logical forms of add, mul, maximum, minimum and the bitwise ops;
// its sum is an i64 count.
// u8: unsigned bytes (8-bit optimizer state codes, image data), no arithmetic.
enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64, boolean, u8 };

const char* dtype_name(DType dtype);  // "f32", ..., "bool"; "unknown" for a value outside the enum
size_t dtype_size(DType dtype);       // bytes per element
bool dtype_is_floating(DType dtype);
// Tensors of the dtype can be created, read, copied and cast.
bool dtype_has_kernels(DType dtype);
// Ops that compute (add, exp, sum, ...) accept the dtype.
bool dtype_has_arithmetic(DType dtype);
// The dtype of an op over a and b, as torch.promote_types: floating beats integer beats bool,
// the wider type wins within a kind, and bf16 with f16 gives f32.
DType promote_types(DType a, DType b);

// The dtype whose elements are T: float f32, double f64, bool bool, and 32- and 64-bit signed
// integers i32 and i64 (whichever of int, long and long long they are).
template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return DType::f32;
  } else if constexpr (std::is_same_v<T, double>) {
    return DType::f64;
  } else if constexpr (std::is_same_v<T, bool>) {
    return DType::boolean;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 4) {
    return DType::i32;
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) == 8) {
    return DType::i64;
  } else {
    static_assert(!sizeof(T),
                  "no dtype holds this element type: use float, double, bool, "
                  "int32_t or int64_t");
  }
}

}  // namespace lt
