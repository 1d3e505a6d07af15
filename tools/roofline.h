#pragma once
#include <cstdint>

namespace lt::tools {

// The AdamW roofline: one pass that reads 4 float arrays and writes 3 of them in place
// (28 bytes per element, the least traffic an AdamW step can have) with trivial arithmetic,
// split over `threads` threads. Compiled with -O3 -march=native. Returns the seconds taken.
double roofline_pass(float* p, const float* g, float* m, float* v, int64_t n, int threads);

}  // namespace lt::tools
