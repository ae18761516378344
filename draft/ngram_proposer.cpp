#include "draft/ngram_proposer.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace tandem {

NgramProposer::NgramProposer(int32_t n_min, int32_t n_max) : n_min_(n_min), n_max_(n_max) {
  if (n_min < 1 || n_max < n_min) throw std::invalid_argument("ngram proposer: need 1 <= n_min <= n_max");
}

Proposal NgramProposer::propose_sequence(std::span<const int32_t> ctx, const ProposeOptions& opts, Rng&) {
  Proposal p;
  const int64_t len = static_cast<int64_t>(ctx.size());
  const bool tree = opts.tree();
  const int32_t ways = tree ? opts.tree_width : 1;
  std::vector<int64_t> used;  // continuations taken (their first index)
  for (int32_t n = std::min<int64_t>(n_max_, len - 1); n >= n_min_; --n) {
    const auto key = ctx.subspan(static_cast<size_t>(len - n));
    // Most recent earlier match first: recent text predicts the continuation best.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(key.begin(), key.end(), ctx.begin() + start)) continue;
      const int64_t from = start + n;
      if (std::find(used.begin(), used.end(), from) != used.end()) continue;  // found again with a shorter n
      used.push_back(from);
      const int64_t count = std::min<int64_t>(opts.max_tokens, len - from);
      if (!tree) {
        p.tokens.assign(ctx.begin() + from, ctx.begin() + from + count);
        return p;
      }
      // Into the tree: follow the nodes it shares with earlier continuations, then branch.
      int32_t parent = -1;
      for (int64_t i = from; i < from + count; ++i) {
        const int32_t t = ctx[static_cast<size_t>(i)];
        int32_t child = -1;
        for (size_t c = 0; c < p.tokens.size() && child < 0; ++c)
          if (p.parents[c] == parent && p.tokens[c] == t) child = static_cast<int32_t>(c);
        if (child < 0) {
          if (static_cast<int32_t>(p.tokens.size()) >= opts.tree_nodes) break;
          child = static_cast<int32_t>(p.tokens.size());
          p.tokens.push_back(t);
          p.parents.push_back(parent);
        }
        parent = child;
      }
      if (static_cast<int32_t>(used.size()) >= ways || static_cast<int32_t>(p.tokens.size()) >= opts.tree_nodes)
        return p;
    }
  }
  return p;
}

}  // namespace tandem
