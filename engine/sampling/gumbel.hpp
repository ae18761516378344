// Counter-based Gumbel noise for coupled (Gumbel-max) sampling and verification.
//
// Gumbel-max: if g_v are independent standard Gumbel variables, argmax_v (log p(v) + g_v)
// is distributed exactly as p. When the noise of output position i is a pure function of
// (seed, i, v) — not a draw from a stream consumed in order — the token at position i no
// longer depends on how many random numbers earlier steps used. The target's token is
// argmax(log p_i + g_i); a draft proposing argmax(log q_i + g_i) with the SAME g_i agrees
// with it whenever the two distributions are close, and accepting a draft token iff it
// equals the target's makes speculative output identical, token for token, to plain
// sampling with the same seed, for any k, policy, batch or proposer.
//
// Determinism: the hash is integer arithmetic and the logarithm is our own (no libm), so
// the same seed gives the same text on every platform.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sampling/sampler.hpp"

namespace tandem {

class PositionNoise {
 public:
  explicit PositionNoise(uint64_t seed) : seed_(seed) {}
  // Uniform on (0, 1) (never 0 or 1) for (position, token). E = -log u is a standard
  // exponential variate and g = -log E a Gumbel one, so argmax (log p + g) = argmin E / p.
  double uniform(int64_t position, int32_t token) const;
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
};

// argmax over d's support of log d(v) + g(position, v), computed as argmin E(position, v) / d(v):
// one exact draw from d that depends only on (seed, position) and d. One hash per token of
// the support; logarithms only for the few tokens that could still win.
// Ties (measure zero) go to the earlier entry of d.
// Throws std::invalid_argument on an empty distribution.
int32_t gumbel_argmax(const Distribution& d, const PositionNoise& noise, int64_t position);

// The w tokens of d's support with the largest log d(v) + g(position, v), best first: the
// first is gumbel_argmax's. The other candidates of a token tree drafted under coupled
// verification (the target's token is the draft's best guess, then its runners-up).
std::vector<int32_t> gumbel_top(const Distribution& d, const PositionNoise& noise, int64_t position, size_t w);

// Natural logarithm for x > 0 in plain IEEE double arithmetic (relative error < 1e-15):
// the same bits on every platform, unlike libm's log.
double portable_log(double x);

}  // namespace tandem
