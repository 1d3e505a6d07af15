#pragma once
// The OpenCL C prelude's helpers (opencl_prelude.cpp). It expects the 8-bit maps' tables,
// lt_signed_levels and lt_unsigned_levels, declared before it (opencl_source.cpp prints them).

namespace lt::backend::opencl {

extern const char* const kPrelude;

}  // namespace lt::backend::opencl
