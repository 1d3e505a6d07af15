#pragma once
// Host-side counter-based uniform draws (SplitMix64's mixing): value i depends only on
// (seed, i), so the same seed gives the same values whatever else ran before. Used by the
// seeded factories (lt::rand(shape, seed)) and the host's MLM masking.
#include <cstdint>

namespace lt::detail {

// Uniform in [0, 1) with 53 random bits.
inline double counter_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace lt::detail
