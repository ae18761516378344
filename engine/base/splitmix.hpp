// splitmix64 (Vigna), shared by everything that needs a fast, well-mixed 64-bit hash.
#pragma once
#include <cstdint>

namespace tandem {

// splitmix64's increment (2^64 / golden ratio) and its output function (Vigna): a bijection
// with full avalanche. The Rng seeds itself with it; counter-based noise (gumbel.hpp) and the
// prefix cache's chained hashes use it as a hash.
constexpr uint64_t kSplitmixGamma = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace tandem
