#include "draft/ngram_proposer.hpp"

#include <algorithm>
#include <stdexcept>

namespace tandem {

NgramProposer::NgramProposer(int32_t n_min, int32_t n_max) : n_min_(n_min), n_max_(n_max) {
  if (n_min < 1 || n_max < n_min) throw std::invalid_argument("ngram proposer: need 1 <= n_min <= n_max");
}

Proposal NgramProposer::propose_sequence(std::span<const int32_t> ctx, const ProposeOptions& opts, Rng&) {
  Proposal p;
  const int64_t len = static_cast<int64_t>(ctx.size());
  for (int32_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_; --n) {
    const auto key = ctx.subspan(static_cast<size_t>(len - n));
    // Most recent earlier match first: recent text predicts the continuation best.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(key.begin(), key.end(), ctx.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t count = std::min<int64_t>(opts.max_tokens, len - from);
      p.tokens.assign(ctx.begin() + from, ctx.begin() + from + count);
      return p;
    }
  }
  return p;
}

}  // namespace tandem
