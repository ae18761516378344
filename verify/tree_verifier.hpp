// Verification of a token tree against the target's distributions, in one walk from the
// root (the pending token). Node i of the tree is drafts[i], a child of parents[i] (-1: the
// root), listed parents first; a node's children are its siblings in the order they were
// drafted. p at a node is the target's final distribution for the position after it, from
// the node's own row of the verification pass (row 0: the root, row 1 + i: node i); it sees
// the tokens of the node's path as its history (penalties).
//
// Each verdict is the chain verifier's, generalised to several children, and reduces to it
// on a chain (the same tokens from the same random numbers):
//  * greedy: follow the child that carries the target's argmax; the first node without one
//    emits the argmax.
//  * coupled: the same with the target's Gumbel-max token at each depth (gumbel.hpp), so the
//    text for a seed is plain decoding's whatever the tree.
//  * rejection (recursive rejection sampling over siblings, SpecTr / Jeon et al. 2024): at a
//    node with children x_1..x_m drawn from q without replacement (x_j from q_j = q with
//    x_1..x_{j-1} removed and renormalised: remove_token, sampler.hpp), accept x_j with probability
//    min(1, p_j(x_j) / q_j(x_j)); on rejection p_{j+1} = norm(max(0, p_j − q_j)) and the next
//    sibling is tried; after the last, the token is drawn from the residual. Each stage is an
//    exact sampler of its p_j whatever the later stages propose, so the output follows p at
//    every node. Deterministic children (top tokens of q, prompt lookup) are point masses
//    q_j = δ(x_j): accept with p_j(x_j), else remove x_j from p.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/sampling/sampler.hpp"
#include "verify/verifier.hpp"

namespace tandem {

struct TreeVerdict {
  std::vector<int32_t> path;  // accepted nodes, from the root's child down
  int32_t next_token = -1;    // the corrected token, or the bonus token after a leaf
  bool leaf = false;          // the walk ended at a leaf: next_token is a bonus token
};

// row_dist(r): p at row r (0: the root, 1 + i: node i), lazily, for the rows the walk reaches.
// draft_dist(r): the q that row r's children were drawn from (rejection mode, sampled
// children); null: deterministic children. position: the absolute position of the root's
// children (the fault-injection hook of verifier.hpp applies at position + depth).
TreeVerdict verify_tree_greedy(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                               const DistFn& row_dist);
TreeVerdict verify_tree_coupled(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                                const DistFn& row_dist, const PositionNoise& noise, int64_t position);
TreeVerdict verify_tree_stochastic(std::span<const int32_t> drafts, std::span<const int32_t> parents,
                                   const DistFn& row_dist, const DistFn* draft_dist, Rng& rng, int64_t position);

// Throws std::invalid_argument unless parents describes a tree listed parents first
// (parents[i] in -1..i-1) with one entry per draft.
void check_tree(std::span<const int32_t> drafts, std::span<const int32_t> parents);

}  // namespace tandem
