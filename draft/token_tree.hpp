// Building a token tree from a draft's distributions (EAGLE-2's dynamic trees, arXiv
// 2406.16858, for any draft model): the root's children come from the draft's logits after
// the context; then, depth by depth, the `width` nodes of the newest depth with the highest
// path probability (the product of the draft's probabilities along the path) are fed to the
// draft in one batched pass, and each gets up to `width` children from its logits, until
// max_tokens deep. Deterministic trees then keep the chain the draft would have drafted (the
// path of first children, the spine, fed at every depth and kept whole) and their most
// probable other nodes up to tree_nodes: such a tree commits at least what the chain of the
// same depth would, and a step's tree can be compared with that chain exactly
// (policies/shape_choice.hpp). Sampled ones spend tree_nodes as they grow,
// keeping enough for the best path to reach max_tokens. With the cost model's T(n) both are
// sized by cost: deterministic trees keep the nodes that maximise the expected tokens per
// cost, sampled ones draw a node's children only while that ratio rises. A tree of width 1
// is a chain.
//
// How children are chosen follows the request's verification (verify/tree_verifier.hpp):
//  * greedy: the most likely tokens (softmax of the logits);
//  * coupled: the tokens with the largest log q + Gumbel noise of the target's position
//    (gumbel_top; the first is the chain draft's token);
//  * rejection: draws from q without replacement (remove_token), q kept for the verifier.
//    Which nodes grow and how many children a node gets are decided before its children are
//    drawn, and no drawn node is dropped: each node's children are then plain sequential
//    draws, what recursive rejection sampling needs to be exact.
// Constrained requests (ProposeOptions::grammar): each node carries the grammar's state
// after its path; its children come from q over what that state allows, and a node whose
// token ends the sentence (or the generation) gets none, as a chain draft stops there.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "draft/proposer.hpp"

namespace tandem {

// A node's child: its token and its log probability under the draft.
struct TreeChild {
  int32_t token;
  double log_prob;
};

class TreeBuilder {
 public:
  // context: the committed tokens (the root is its last); opts: the job's (max_tokens is the
  // depth limit, tree_width and tree_nodes the shape); rng: the sequence's stream (rejection).
  TreeBuilder(std::span<const int32_t> context, const ProposeOptions& opts, Rng* rng);

  // The root's (node -1) or a fed node's children from the draft's logits for the position
  // after it (the draft's whole vocabulary; ids at or past opts.vocab are never proposed).
  void expand(int32_t node, std::span<const float> logits);
  // The same in two halves, for children chosen elsewhere (on the device: DraftProbs::
  // tree_children): how many children the node may get now (0: none; the node counts as
  // expanded either way; the room stays reserved until its children come, so that several
  // nodes of a pass can be begun before any is finished, as one device call serves them),
  // then its children, best first, at most that many, chosen as expand would (greedy: the
  // most likely tokens; coupled: gumbel_top's; rejection mode: drawn from q without
  // replacement, q being row q_row of the step's DraftProbs store, which the proposal carries
  // for the verifier).
  int32_t begin_expand(int32_t node);
  void add_children(int32_t node, std::span<const TreeChild> kids, int32_t q_row = -1);
  // The slot of the next node begun (node count + rooms reserved): the first child of the
  // next begin_expand takes it, the j-th slot + j (below kMaxTreeNodes for sampled trees).
  int32_t next_slot() const;
  // Rejection mode, with the cost model: how many of `room` children to draw, from q's most
  // likely probabilities (descending; all of them when fewer than room): sized_by_cost.
  int32_t children_to_draw(int32_t node, int32_t room, std::span<const float> top_probs) const;
  // Constrained: the grammar's mask over a begun node's children (what its path's state
  // allows; node -1: the root); null when unconstrained.
  std::shared_ptr<const TokenMask> children_mask(int32_t node) const;
  bool sampled() const;  // rejection mode: children drawn from q, kept as drawn
  // What choosing a node's children needs: the context and the node's path (penalties), and
  // the children's depth and absolute position (the noise's).
  std::vector<int32_t> history(int32_t node) const;
  int32_t children_depth(int32_t node) const;
  int64_t children_position(int32_t node) const;
  // The nodes to feed to the draft next, in feed order (the best `width` of the newest
  // depth that can still grow); marks them fed. Empty: the tree is complete.
  std::vector<int32_t> take_frontier();
  // A fed node as the draft's pass takes it: its token, its position (context size - 1 +
  // depth) and its ancestor mask over the fed nodes (bit f: the f-th fed node; Batch::add_tree
  // with tree_base = context size).
  int32_t token(int32_t node) const { return nodes_[static_cast<size_t>(node)].token; }
  int32_t position(int32_t node) const;
  uint64_t fed_mask(int32_t node) const;
  int32_t fed_count() const { return fed_; }
  // The fed nodes in feed order: each one's token and its parent's feed order (-1: the
  // root). Their KV stays in the draft's cache, for the accepted path to be kept from.
  struct FedNode {
    int32_t token, parent;
  };
  std::vector<FedNode> fed_nodes() const;

  // The tree as a proposal: tokens, parents, and for rejection mode dists by row.
  Proposal take();

 private:
  struct Node {
    int32_t token = -1, parent = -1, depth = 0;
    double score = 0.0;  // log path probability under the draft
    int32_t fed = -1;    // feed order (bit of the mask), -1: not fed
    bool expanded = false;
    bool spine = false;  // deterministic trees: on the path of first children (the chain's drafts)
    GrammarState grammar = {};  // constrained: the state after the node's path
  };
  std::vector<int32_t> path_tokens(int32_t node) const;  // context's continuation up to node
  // expand's children of a begun node, from its row of logits on the host.
  std::vector<TreeChild> host_children(int32_t node, int32_t room, std::span<const float> logits);
  // How many children the next node expanded at `depth` may get (expansions come best first
  // within a depth).
  int32_t room_for_children(int32_t depth);
  // Sampled trees with the cost model's T(n) (ProposeOptions::tree_cost): how many of `room`
  // children to draw from q, decided from q and the tree so far before any is drawn (so the
  // siblings stay plain draws without replacement).
  int32_t sized_by_cost(int32_t room, std::span<const float> top_probs, double parent_score) const;
  // Deterministic trees: the node indices in the order take() keeps them (the spine, then the
  // others most probable first), and how many of them it keeps (up to tree_nodes; with the
  // cost model, the count from the spine up with the most expected tokens per cost, whose
  // expected tokens go to *expected and whose cost ratio to the next count to *step_cost).
  std::vector<int32_t> keep_order() const;
  size_t kept_count(const std::vector<int32_t>& order, double* expected = nullptr, double* step_cost = nullptr) const;

  std::span<const int32_t> context_;
  ProposeOptions opts_;
  Rng* rng_;
  std::vector<Node> nodes_;
  std::vector<Distribution> row_dists_;  // rejection mode: q of each row's children
  std::vector<int32_t> row_q_rows_;      // or its row in the DraftProbs store (on the device)
  std::vector<int32_t> reserved_;        // rooms begun, not yet filled, by row (node + 1)
  int32_t fed_ = 0;
  int32_t grown_depth_ = 0;  // the deepest depth whose frontier was taken
  int32_t last_depth_ = -1;  // the depth of the last expansion
};

}  // namespace tandem
