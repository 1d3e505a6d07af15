#pragma once
// The OpenCL C prelude's helpers (opencl_prelude.cpp). It expects the 8-bit maps' tables,
// lt_signed_levels and lt_unsigned_levels, declared before it, and, for a program that
// quantizes, LT_BUCKETS with the other bucket constants and the bucket tables lt_signed_buckets
// and lt_unsigned_buckets (opencl_source.cpp prints them).

namespace lt::backend::opencl {

extern const char* const kPrelude;

}  // namespace lt::backend::opencl
