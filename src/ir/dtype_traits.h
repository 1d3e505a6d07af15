#pragma once
// Everything the engine knows about a dtype, in one place: a row of facts per DType
// (kDTypeInfos) and, for the dtypes with kernels, the C++ types that hold and compute its
// elements (ElementTraits). Code that depends on the dtype dispatches through visit_dtype,
// which throws for a dtype without kernels instead of treating it as some other dtype.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "ir/op_semantics.h"
#include "lazytensor/dtype.h"

namespace lt {

struct DTypeInfo {
  DType dtype;
  const char* name;
  uint8_t size;  // bytes per element
  bool floating;
  bool has_kernels;  // created, read, copied and cast
  bool arithmetic;   // ops that compute accept it
  // Computed in registers wider than its storage (bf16 in f32), so each op's result is
  // rounded back to the dtype.
  bool wide_register;
  // For generated kernels (has_kernels only): the element type in memory, the register type
  // ops compute in, a register's conversion from any register type (a function of the kernel
  // prelude or a cast), and, for wide registers, the load and store between memory and
  // register.
  const char* c_storage;
  const char* c_register;
  const char* c_cast;
  const char* c_load;
  const char* c_store;
  const char* c_store_exact;  // for a register that holds a value of the dtype
  // For a register that a rounding to the dtype in the same kernel produced (a NaN there is
  // already quiet): no rounding and no NaN check.
  const char* c_store_rounded;
};

// In DType's order.
inline constexpr DTypeInfo kDTypeInfos[] = {
    {DType::f32, "f32", 4, true, true, true, false, "float", "float", "static_cast<float>", nullptr,
     nullptr, nullptr, nullptr},
    {DType::f64, "f64", 8, true, true, true, false, "double", "double", "static_cast<double>",
     nullptr, nullptr, nullptr, nullptr},
    {DType::bf16, "bf16", 2, true, true, true, true, "unsigned short", "float",
     "lt_kernel::lt_cast_bf16", "lt_kernel::lt_bf16_load", "lt_kernel::lt_bf16_store",
     "lt_kernel::lt_bf16_store_exact", "lt_kernel::lt_bf16_store_rounded"},
    {DType::f16, "f16", 2, true, true, true, true, "unsigned short", "float",
     "lt_kernel::lt_cast_f16", "lt_kernel::lt_f16_load", "lt_kernel::lt_f16_store",
     "lt_kernel::lt_f16_store_exact", "lt_kernel::lt_f16_store_exact"},
    {DType::i32, "i32", 4, false, true, true, false, "int", "int", "lt_kernel::lt_cast_i32",
     nullptr, nullptr, nullptr, nullptr},
    {DType::i64, "i64", 8, false, true, true, false, "long long", "long long",
     "lt_kernel::lt_cast_i64", nullptr, nullptr, nullptr, nullptr},
    {DType::boolean, "bool", 1, false, true, false, false, "bool", "bool", "static_cast<bool>",
     nullptr, nullptr, nullptr, nullptr},
    {DType::u8, "u8", 1, false, true, false, false, "unsigned char", "unsigned char",
     "lt_kernel::lt_cast_u8", nullptr, nullptr, nullptr, nullptr},
};
inline constexpr size_t kNumDTypes = sizeof(kDTypeInfos) / sizeof(kDTypeInfos[0]);
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < kNumDTypes; ++i) {
    if (static_cast<size_t>(kDTypeInfos[i].dtype) != i) return false;
  }
  return kNumDTypes == static_cast<size_t>(DType::u8) + 1;
}
static_assert(rows_in_enum_order(), "kDTypeInfos needs one row per DType, in the enum's order");

// The dtype's row; throws lt::Error for a value outside the enum.
const DTypeInfo& dtype_info(DType dtype);
// The names of the dtypes with a property, as "f32, f64, bf16", for messages.
std::string dtype_list(bool DTypeInfo::*property);
// Throws lt::Error saying that `dtype` has no kernels.
[[noreturn]] void throw_no_kernels(DType dtype);

// A bf16 element as stored: the upper 16 bits of the f32 with the same sign and exponent.
struct BFloat16 {
  uint16_t bits;
};

// An f16 element as stored: IEEE binary16's bits.
struct Float16 {
  uint16_t bits;
};

// The types behind a dtype with kernels, keyed by its storage type T: Register is what
// kernels compute in, and cast(x) converts any register value to a Register of this dtype,
// with the kernel prelude's functions, so host code, the interpreter and generated kernels
// convert alike.
template <class T>
struct ElementTraits;

template <>
struct ElementTraits<float> {
  static constexpr DType dtype = DType::f32;
  using Register = float;
  template <class From>
  static Register cast(From x) {
    return static_cast<float>(x);
  }
};
template <>
struct ElementTraits<double> {
  static constexpr DType dtype = DType::f64;
  using Register = double;
  template <class From>
  static Register cast(From x) {
    return static_cast<double>(x);
  }
};
template <>
struct ElementTraits<BFloat16> {
  static constexpr DType dtype = DType::bf16;
  using Register = float;
  template <class From>
  static Register cast(From x) {
    return lt_kernel::lt_cast_bf16(x);
  }
};
template <>
struct ElementTraits<Float16> {
  static constexpr DType dtype = DType::f16;
  using Register = float;
  template <class From>
  static Register cast(From x) {
    return lt_kernel::lt_cast_f16(x);
  }
};
template <>
struct ElementTraits<int32_t> {
  static constexpr DType dtype = DType::i32;
  using Register = int32_t;
  template <class From>
  static Register cast(From x) {
    return lt_kernel::lt_cast_i32(x);
  }
};
template <>
struct ElementTraits<int64_t> {
  static constexpr DType dtype = DType::i64;
  using Register = int64_t;
  template <class From>
  static Register cast(From x) {
    return lt_kernel::lt_cast_i64(x);
  }
};
template <>
struct ElementTraits<uint8_t> {
  static constexpr DType dtype = DType::u8;
  using Register = uint8_t;
  template <class From>
  static Register cast(From x) {
    return lt_kernel::lt_cast_u8(x);
  }
};
template <>
struct ElementTraits<bool> {
  static constexpr DType dtype = DType::boolean;
  using Register = bool;
  template <class From>
  static Register cast(From x) {
    return static_cast<bool>(x);
  }
};

template <class T>
using RegisterOf = typename ElementTraits<T>::Register;

// The table's row for storage type T, at compile time.
template <class T>
constexpr const DTypeInfo& dtype_info_of() {
  return kDTypeInfos[static_cast<size_t>(ElementTraits<T>::dtype)];
}

// Memory to register and back.
template <class T>
RegisterOf<T> load_element(T value) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return lt_kernel::lt_bf16_load(value.bits);
  } else if constexpr (std::is_same_v<T, Float16>) {
    return lt_kernel::lt_f16_load(value.bits);
  } else {
    return value;
  }
}
template <class T>
T store_element(RegisterOf<T> value) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16{lt_kernel::lt_bf16_store(value)};
  } else if constexpr (std::is_same_v<T, Float16>) {
    return Float16{lt_kernel::lt_f16_store(value)};
  } else {
    return value;
  }
}

// One element converted from dtype From to dtype To (both storage types), as a Cast kernel
// converts it.
template <class To, class From>
To convert_element(From value) {
  return store_element<To>(ElementTraits<To>::cast(load_element(value)));
}

template <class T>
constexpr bool check_element_traits() {
  static_assert(dtype_info_of<T>().has_kernels && dtype_info_of<T>().size == sizeof(T) &&
                    dtype_info_of<T>().wide_register != std::is_same_v<RegisterOf<T>, T>,
                "storage type and table disagree");
  static_assert(sizeof(RegisterOf<T>) <= 8, "registers must fit the interpreter's 8-byte slots");
  return true;
}
static_assert(check_element_traits<float>() && check_element_traits<double>() &&
              check_element_traits<BFloat16>() && check_element_traits<Float16>() &&
              check_element_traits<int32_t>() && check_element_traits<int64_t>() &&
              check_element_traits<bool>() && check_element_traits<uint8_t>());
static_assert(sizeof(unsigned int) == 4 && sizeof(unsigned short) == 2 && sizeof(int) == 4 &&
                  sizeof(unsigned char) == 1 && sizeof(long long) == 8,
              "the kernel prelude's types must match the storage types");

template <class T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the storage type T of `dtype`; throws lt::Error for a dtype
// without kernels (a value outside the enum).
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return std::forward<F>(f)(TypeTag<float>{});
    case DType::f64:
      return std::forward<F>(f)(TypeTag<double>{});
    case DType::bf16:
      return std::forward<F>(f)(TypeTag<BFloat16>{});
    case DType::i32:
      return std::forward<F>(f)(TypeTag<int32_t>{});
    case DType::i64:
      return std::forward<F>(f)(TypeTag<int64_t>{});
    case DType::boolean:
      return std::forward<F>(f)(TypeTag<bool>{});
    case DType::u8:
      return std::forward<F>(f)(TypeTag<uint8_t>{});
    case DType::f16:
      return std::forward<F>(f)(TypeTag<Float16>{});
  }
  throw_no_kernels(dtype);
}

}  // namespace lt
