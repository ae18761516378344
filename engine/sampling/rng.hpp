// The per-request random stream. Speculative decoding promises "same seed ⇒ same output",
// so the stream must be bit-identical on every platform and compiler: we define the
// generator (xoshiro256**, seeded through splitmix64, both as published by Vigna) and the
// bits → [0,1) mapping ourselves instead of using <random>'s distributions, whose outputs
// are implementation-defined.
#pragma once
#include <array>
#include <bit>
#include <cstdint>

#include "engine/base/splitmix.hpp"

namespace tandem {

class Rng {
 public:
  // splitmix64 expands the 64-bit seed into the 256-bit state. It is a bijection of its
  // counter, so four consecutive outputs are never all zero (xoshiro's one forbidden state),
  // and nearby seeds (0, 1, 2, ...) still give unrelated streams.
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t& word : s_) word = splitmix64(x);
  }

  // xoshiro256** (Blackman & Vigna 2018): period 2^256 − 1, passes BigCrush, a few cycles.
  uint64_t next_u64() {
    const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = std::rotl(s_[3], 45);
    return result;
  }

  // Uniform on [0,1): the top 53 bits scaled by 2^-53. Every value is a multiple of 2^-53,
  // the conversion is exact, and 1.0 can never come out.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

  bool operator==(const Rng&) const = default;

 private:
  static uint64_t splitmix64(uint64_t& x) { return splitmix64_mix(x += kSplitmixGamma); }

  std::array<uint64_t, 4> s_{};
};

}  // namespace tandem
