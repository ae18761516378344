#include "verify/step_verifier.hpp"

#include <stdexcept>

namespace tandem {

VerifyResult verify_host(const HostStep& s) {
  if (!s.target) throw std::invalid_argument("verify_host: no target distributions");
  if (s.greedy) return verify_greedy(s.drafts, *s.target);
  if (s.coupled) return verify_coupled(s.drafts, *s.target, *s.coupled, s.position);
  if (!s.rng) throw std::invalid_argument("verify_host: rejection sampling needs the request's random stream");
  return verify_stochastic(s.drafts, *s.target, s.draft, *s.rng, s.position);
}

TreeVerdict verify_host_tree(const HostStep& s, std::span<const int32_t> drafts, std::span<const int32_t> parents) {
  if (!s.target) throw std::invalid_argument("verify_host_tree: no target distributions");
  if (s.greedy) return verify_tree_greedy(drafts, parents, *s.target);
  if (s.coupled) return verify_tree_coupled(drafts, parents, *s.target, *s.coupled, s.position);
  if (!s.rng) throw std::invalid_argument("verify_host_tree: rejection sampling needs the request's random stream");
  return verify_tree_stochastic(drafts, parents, *s.target, s.draft, *s.rng, s.position);
}

}  // namespace tandem
