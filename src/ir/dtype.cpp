#include "lazytensor/dtype.h"

namespace lt {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::boolean:
      return "bool";
  }
  return "unknown";
}

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::boolean:
      return 1;
  }
  return 0;
}

bool dtype_has_kernels(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64;
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::f64 || b == DType::f64) return DType::f64;
  return DType::f32;
}

}  // namespace lt
