#include "verify/tree_verifier.hpp"

#include <stdexcept>
#include <string>

namespace tandem {
namespace {

// The tree's children lists, in drafting order.
std::vector<std::vector<int32_t>> children_of(std::span<const int32_t> drafts, std::span<const int32_t> parents) {
  check_tree(drafts, parents);
  std::vector<std::vector<int32_t>> kids(drafts.size() + 1);  // [0]: the root's
  for (size_t i = 0; i < parents.size(); ++i) kids[static_cast<size_t>(parents[i] + 1)].push_back(static_cast<int32_t>(i));
  return kids;
}

int32_t row_of(int32_t node) { return node + 1; }

// The walk that greedy and coupled verification share: at each node the target's token
// (pick(p, depth)); follow the child that carries it.
template <class Pick>
TreeVerdict walk_by_token(std::span<const int32_t> drafts, std::span<const int32_t> parents, const DistFn& row_dist,
                          int64_t position, Pick&& pick) {
  const auto kids = children_of(drafts, parents);
  TreeVerdict v;
  for (int32_t node = -1, depth = 0;; ++depth) {
    const int32_t y = pick(with_injected_bias(row_dist(row_of(node)), position + depth), depth);
    const auto& ks = kids[static_cast<size_t>(node + 1)];
    int32_t next = -1;
    for (int32_t c : ks)
      if (drafts[static_cast<size_t>(c)] == y) {
        next = c;
        break;
      }
    if (next < 0) {
      v.next_token = y;
      v.leaf = ks.empty();
      return v;
    }
    v.path.push_back(next);
    node = next;
  }
}

}  // namespace

void check_tree(std::span<const int32_t> drafts, std::span<const int32_t> parents) {
  if (parents.size() != drafts.size())
    throw std::invalid_argument("token tree: " + std::to_string(parents.size()) + " parents for " +
                                std::to_string(drafts.size()) + " nodes");
  for (size_t i = 0; i < parents.size(); ++i)
    if (parents[i] < -1 || parents[i] >= static_cast<int32_t>(i))
      throw std::invalid_argument("token tree: node " + std::to_string(i) + " has parent " +
                                  std::to_string(parents[i]) + " (parents must come first)");
}

TreeVerdict verify_tree_greedy(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                               const DistFn& row_dist) {
  return walk_by_token(drafts, parents, row_dist, -1, [](const Distribution& p, int32_t) {
    if (p.ids.empty()) throw std::logic_error("verify_tree_greedy: empty target distribution");
    return p.ids[0];  // sorted by probability: the argmax comes first
  });
}

TreeVerdict verify_tree_coupled(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                                const DistFn& row_dist, const PositionNoise& noise, int64_t position) {
  return walk_by_token(drafts, parents, row_dist, position, [&](const Distribution& p, int32_t depth) {
    return gumbel_argmax(p, noise, position + depth);
  });
}

TreeVerdict verify_tree_stochastic(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                                   const DistFn& row_dist, const DistFn* draft_dist, Rng& rng, int64_t position) {
  const auto kids = children_of(drafts, parents);
  TreeVerdict v;
  for (int32_t node = -1, depth = 0;; ++depth) {
    Distribution p = with_injected_bias(row_dist(row_of(node)), position + depth);
    const auto& ks = kids[static_cast<size_t>(node + 1)];
    if (ks.empty()) {
      v.next_token = sample(p, rng);
      v.leaf = true;
      return v;
    }
    Distribution q = draft_dist ? (*draft_dist)(row_of(node)) : Distribution{};
    int32_t next = -1;
    for (size_t j = 0; j < ks.size() && next < 0; ++j) {
      const int32_t x = drafts[static_cast<size_t>(ks[j])];
      if (!draft_dist) q = Distribution{{x}, {1.0f}};  // a deterministic child: δ(x)
      const float qx = prob_of(q, x);
      if (!(qx > 0.0f)) throw std::logic_error("verify_tree_stochastic: a drafted child has zero draft probability");
      // Accept with probability min(1, p/q): u < p/q with u uniform on [0,1).
      if (rng.uniform() * qx < prob_of(p, x)) {
        next = ks[j];
        break;
      }
      p = residual(p, q);
      if (draft_dist) q = remove_token(q, x);
    }
    if (next < 0) {
      v.next_token = sample(p, rng);
      return v;
    }
    v.path.push_back(next);
    node = next;
  }
}

}  // namespace tandem
