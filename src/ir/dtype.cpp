#include "lazytensor/dtype.h"

#include <string>

#include "ir/dtype_traits.h"
#include "lazytensor/error.h"

namespace lt {

namespace {

bool in_enum(DType dtype) {
  return static_cast<size_t>(dtype) < kNumDTypes;
}

}  // namespace

const DTypeInfo& dtype_info(DType dtype) {
  if (!in_enum(dtype)) {
    throw Error("dtype: " + std::to_string(static_cast<int>(dtype)) + " is not a DType");
  }
  return kDTypeInfos[static_cast<size_t>(dtype)];
}

std::string dtype_list(bool DTypeInfo::*property) {
  std::string list;
  for (const DTypeInfo& info : kDTypeInfos) {
    if (info.*property) list += (list.empty() ? "" : ", ") + std::string(info.name);
  }
  return list;
}

void throw_no_kernels(DType dtype) {
  throw Error(std::string("dtype ") + dtype_name(dtype) +
              " is not supported yet (supported: " + dtype_list(&DTypeInfo::has_kernels) + ")");
}

const char* dtype_name(DType dtype) {
  // Names go into error messages, so an invalid value gets a name rather than a throw.
  return in_enum(dtype) ? kDTypeInfos[static_cast<size_t>(dtype)].name : "unknown";
}

size_t dtype_size(DType dtype) {
  return dtype_info(dtype).size;
}

bool dtype_is_floating(DType dtype) {
  return dtype_info(dtype).floating;
}

bool dtype_has_kernels(DType dtype) {
  return in_enum(dtype) && kDTypeInfos[static_cast<size_t>(dtype)].has_kernels;
}

bool dtype_has_arithmetic(DType dtype) {
  return in_enum(dtype) && kDTypeInfos[static_cast<size_t>(dtype)].arithmetic;
}

DType promote_types(DType a, DType b) {
  const DTypeInfo& x = dtype_info(a);
  const DTypeInfo& y = dtype_info(b);
  if (a == b) return a;
  if (x.floating != y.floating) return x.floating ? a : b;
  if (x.floating) {
    // bf16 and f16 have no common 16-bit type: PyTorch gives f32.
    if (x.size == y.size) return DType::f32;
    return x.size > y.size ? a : b;
  }
  // Integers and bool: bool is the narrowest, then the wider integer wins.
  if (a == DType::boolean) return b;
  if (b == DType::boolean) return a;
  return x.size > y.size ? a : b;
}

}  // namespace lt
