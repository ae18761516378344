#include "draft/token_tree.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/exp_nonpos.hpp"
#include "kernels/tree_keys.hpp"

namespace tandem {

TreeBuilder::TreeBuilder(std::span<const int32_t> context, const ProposeOptions& opts, Rng* rng)
    : context_(context), opts_(opts), rng_(rng) {
  if (context.empty()) throw std::invalid_argument("TreeBuilder: empty context");
  if (!opts.sampling) throw std::invalid_argument("TreeBuilder: no sampling parameters");
  if (opts.tree_width < 1 || opts.tree_nodes < 1 || opts.tree_nodes > kernels::kMaxTreeNodes)
    throw std::invalid_argument("TreeBuilder: a tree has width >= 1 and 1.." + std::to_string(kernels::kMaxTreeNodes) +
                                " nodes (got width " + std::to_string(opts.tree_width) + ", " +
                                std::to_string(opts.tree_nodes) + " nodes)");
  if (!opts.sampling->greedy() && !opts.coupled && !rng)
    throw std::invalid_argument("TreeBuilder: sampled drafts need the sequence's random stream");
}

std::vector<int32_t> TreeBuilder::path_tokens(int32_t node) const {
  std::vector<int32_t> p;
  for (int32_t n = node; n >= 0; n = nodes_[static_cast<size_t>(n)].parent) p.push_back(nodes_[static_cast<size_t>(n)].token);
  std::reverse(p.begin(), p.end());
  return p;
}

bool TreeBuilder::sampled() const { return !opts_.sampling->greedy() && !opts_.coupled; }

int32_t TreeBuilder::room_for_children(int32_t depth) {
  const bool first = depth != last_depth_;  // the best node of its depth: expanded first
  last_depth_ = depth;
  const int32_t size = next_slot();
  if (!sampled()) return std::min(opts_.tree_width, kernels::kMaxTreeNodes - size);  // pruned in take()
  // Sampled: nothing drawn is dropped, so the budget is spent as it is drawn; the nodes the
  // best path needs to reach max_tokens stay reserved.
  const int32_t reserve = std::max(0, opts_.max_tokens - depth - 1);
  int32_t room = std::min(opts_.tree_width, opts_.tree_nodes - size - reserve);
  if (first) room = std::max(room, std::min(1, opts_.tree_nodes - size));
  return room;
}

int32_t TreeBuilder::begin_expand(int32_t node) {
  const int32_t depth = node < 0 ? 0 : nodes_.at(static_cast<size_t>(node)).depth;
  if (node >= 0) nodes_[static_cast<size_t>(node)].expanded = true;
  if (depth >= opts_.max_tokens) return 0;
  // Constrained: no children after the sentence ends.
  if (const TokenGrammar* grammar = opts_.grammar_state ? opts_.grammar : nullptr) {
    const GrammarState& state = node < 0 ? *opts_.grammar_state : nodes_[static_cast<size_t>(node)].grammar;
    if (TokenGrammar::complete(state) || (node >= 0 && grammar->vocab().is_eog(nodes_[static_cast<size_t>(node)].token)))
      return 0;
  }
  const int32_t room = std::max(0, room_for_children(depth));
  reserved_.resize(std::max(reserved_.size(), static_cast<size_t>(node + 2)), 0);
  reserved_[static_cast<size_t>(node + 1)] += room;
  return room;
}

int32_t TreeBuilder::next_slot() const {
  return static_cast<int32_t>(nodes_.size()) + std::accumulate(reserved_.begin(), reserved_.end(), 0);
}

int32_t TreeBuilder::children_to_draw(int32_t node, int32_t room, std::span<const float> top_probs) const {
  return sized_by_cost(room, top_probs, node < 0 ? 0.0 : nodes_.at(static_cast<size_t>(node)).score);
}

int32_t TreeBuilder::children_depth(int32_t node) const {
  return node < 0 ? 1 : nodes_.at(static_cast<size_t>(node)).depth + 1;
}

std::vector<int32_t> TreeBuilder::history(int32_t node) const {
  std::vector<int32_t> h(context_.begin(), context_.end());
  const std::vector<int32_t> path = path_tokens(node);
  h.insert(h.end(), path.begin(), path.end());
  return h;
}

int64_t TreeBuilder::children_position(int32_t node) const {
  return static_cast<int64_t>(context_.size()) + children_depth(node) - 1;
}

void TreeBuilder::expand(int32_t node, std::span<const float> logits) {
  const int32_t room = begin_expand(node);
  add_children(node, room > 0 ? host_children(node, room, logits) : std::vector<TreeChild>{});
}

std::shared_ptr<const TokenMask> TreeBuilder::children_mask(int32_t node) const {
  const TokenGrammar* grammar = opts_.grammar_state ? opts_.grammar : nullptr;
  if (!grammar) return nullptr;
  return grammar->mask(node < 0 ? *opts_.grammar_state : nodes_.at(static_cast<size_t>(node)).grammar);
}

std::vector<TreeChild> TreeBuilder::host_children(int32_t node, int32_t room, std::span<const float> logits) {
  const int32_t depth = node < 0 ? 0 : nodes_[static_cast<size_t>(node)].depth;
  // Constrained: children over what the node's state allows.
  const std::shared_ptr<const TokenMask> mask = children_mask(node);
  const size_t shared = opts_.vocab > 0 ? std::min(logits.size(), static_cast<size_t>(opts_.vocab)) : logits.size();
  const std::span<const float> row = logits.first(shared);
  const SamplingParams& sp = *opts_.sampling;
  const double parent_score = node < 0 ? 0.0 : nodes_[static_cast<size_t>(node)].score;
  std::vector<TreeChild> kids;
  if (sp.greedy()) {
    // The most likely tokens of the draft at temperature 1 (its final distribution is a
    // point mass), in one pass over the vocabulary (ties: the lower id); NaN never wins.
    std::vector<std::pair<float, int32_t>> top;  // best first
    const size_t n = static_cast<size_t>(room);
    auto allowed = [&](size_t i) { return !mask || mask_allows(*mask, static_cast<int32_t>(i)); };
    for (size_t i = 0; i < row.size(); ++i) {
      const float x = row[i];
      if (!(x > -INFINITY) || (top.size() == n && !(x > top.back().first)) || !allowed(i)) continue;
      auto at = std::upper_bound(top.begin(), top.end(), x,
                                 [](float v, const std::pair<float, int32_t>& e) { return v > e.first; });
      top.insert(at, {x, static_cast<int32_t>(i)});
      if (top.size() > n) top.pop_back();
    }
    if (top.empty() || !std::isfinite(top[0].first)) return kids;  // nothing possible
    const float mx = top[0].first;
    // exp_nonpos's terms summed in double (the device's top_rows sums the same terms in
    // another order: the same scores to ~1e-16, so the same tree).
    double z = 0.0;
    for (size_t i = 0; i < row.size(); ++i)
      z += row[i] > -INFINITY && allowed(i) ? static_cast<double>(kernels::exp_nonpos(row[i] - mx)) : 0.0;
    const double log_z = std::log(z);
    for (const auto& [x, id] : top) kids.push_back({id, static_cast<double>(x - mx) - log_z});
  } else {
    const std::vector<int32_t> hist = history(node);
    Distribution q;
    try {
      q = mask ? make_distribution(row, sp, hist, *mask) : make_distribution(row, sp, hist);
    } catch (const std::runtime_error&) {
      if (!mask) throw;
      return kids;  // nothing the grammar allows is in the draft's vocabulary: no children
    }
    auto logq = [&](int32_t t) { return std::log(static_cast<double>(q.prob(t))); };
    if (opts_.coupled) {
      const int64_t position = static_cast<int64_t>(context_.size()) + depth;
      for (int32_t t : gumbel_top(q, *opts_.coupled, position, static_cast<size_t>(room))) kids.push_back({t, logq(t)});
    } else {
      const int32_t drawn = sized_by_cost(room, q.probs, parent_score);
      Distribution left = q;  // children drawn without replacement
      for (int32_t j = 0; j < drawn && !left.ids.empty(); ++j) {
        const int32_t t = sample(left, *rng_);
        kids.push_back({t, logq(t)});
        const Distribution next = remove_token(left, t);
        if (next.size() == left.size()) break;  // nothing else has mass
        left = next;
      }
      row_dists_.resize(std::max(row_dists_.size(), static_cast<size_t>(node + 2)));
      row_dists_[static_cast<size_t>(node + 1)] = std::move(q);
    }
  }
  return kids;
}

void TreeBuilder::add_children(int32_t node, std::span<const TreeChild> kids, int32_t q_row) {
  const int32_t depth = node < 0 ? 0 : nodes_.at(static_cast<size_t>(node)).depth;
  if (static_cast<size_t>(node + 1) < reserved_.size()) reserved_[static_cast<size_t>(node + 1)] = 0;
  if (q_row >= 0) {
    row_q_rows_.resize(std::max(row_q_rows_.size(), static_cast<size_t>(node + 2)), -1);
    row_q_rows_[static_cast<size_t>(node + 1)] = q_row;
  }
  const double parent_score = node < 0 ? 0.0 : nodes_[static_cast<size_t>(node)].score;
  const TokenGrammar* grammar = opts_.grammar_state ? opts_.grammar : nullptr;
  const GrammarState state =
      grammar ? (node < 0 ? *opts_.grammar_state : nodes_[static_cast<size_t>(node)].grammar) : GrammarState{};
  const bool on_spine = !sampled() && (node < 0 || nodes_[static_cast<size_t>(node)].spine);
  for (size_t i = 0; i < kids.size(); ++i) {
    Node c;
    c.token = kids[i].token;
    c.parent = node;
    c.depth = depth + 1;
    c.score = parent_score + kids[i].log_prob;
    c.spine = on_spine && i == 0;  // the first child: the chain's draft
    if (grammar) c.grammar = grammar->after(state, c.token);
    nodes_.push_back(c);
  }
}

int32_t TreeBuilder::sized_by_cost(int32_t room, std::span<const float> top_probs, double parent_score) const {
  const std::span<const double> cost = opts_.tree_cost;
  if (cost.empty() || room <= 0) return room;
  // A child is accepted about as often as its path reaches it times its own probability:
  // the parent's path probability times the j-th largest q (known before anything is drawn).
  // Children are added while the expected tokens per cost of the target's pass rise, as
  // take() sizes deterministic trees.
  double expected = 1.0;
  for (const Node& n : nodes_) expected += std::exp(n.score);
  const auto size = static_cast<int32_t>(nodes_.size());
  const double reach = std::exp(parent_score);
  auto at = [&](int32_t n) { return std::max(cost[static_cast<size_t>(std::min<int32_t>(n, static_cast<int32_t>(cost.size()) - 1))], 1e-9); };
  int32_t m = 0;
  while (m < room && static_cast<size_t>(m) < top_probs.size()) {
    const double gain = reach * static_cast<double>(top_probs[static_cast<size_t>(m)]);
    if ((expected + gain) / at(size + m + 1) <= expected / at(size + m)) break;
    expected += gain;
    ++m;
  }
  return m;
}

std::vector<int32_t> TreeBuilder::take_frontier() {
  const int32_t d = grown_depth_ + 1;
  std::vector<int32_t> cand;
  const int32_t limit = sampled() ? opts_.tree_nodes : kernels::kMaxTreeNodes;
  if (d < opts_.max_tokens && static_cast<int32_t>(nodes_.size()) < limit)
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].depth == d && !nodes_[i].expanded && nodes_[i].fed < 0) cand.push_back(static_cast<int32_t>(i));
  std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
    const Node &x = nodes_[static_cast<size_t>(a)], &y = nodes_[static_cast<size_t>(b)];
    return x.spine != y.spine ? x.spine : x.score > y.score;  // the spine grows at every depth
  });
  if (!sampled() && !opts_.tree_cost.empty() && !cand.empty()) {
    // Sized by cost: a node's children are no more probable than it, and take() keeps a node
    // only where its path probability pays for its share of the target's pass. A node off the
    // spine too improbable for that is not fed: its children would all be cut, and a draft
    // pass over fewer nodes costs less (a confident draft's tree stays a chain).
    double expected = 1.0, step = 0.0;
    kept_count(keep_order(), &expected, &step);
    const double floor = expected * step;
    cand.erase(std::remove_if(cand.begin(), cand.end(),
                              [&](int32_t n) {
                                const Node& x = nodes_[static_cast<size_t>(n)];
                                return !x.spine && std::exp(x.score) <= floor;
                              }),
               cand.end());
  }
  const size_t room = static_cast<size_t>(std::max(0, kernels::kMaxTreeNodes - fed_));
  cand.resize(std::min({cand.size(), static_cast<size_t>(opts_.tree_width), room}));
  for (int32_t n : cand) nodes_[static_cast<size_t>(n)].fed = fed_++;
  grown_depth_ = d;
  return cand;
}

int32_t TreeBuilder::position(int32_t node) const {
  return static_cast<int32_t>(context_.size()) - 1 + nodes_.at(static_cast<size_t>(node)).depth;
}

uint64_t TreeBuilder::fed_mask(int32_t node) const {
  uint64_t m = 0;
  for (int32_t n = node; n >= 0; n = nodes_[static_cast<size_t>(n)].parent) {
    const int32_t f = nodes_.at(static_cast<size_t>(n)).fed;
    if (f < 0) throw std::logic_error("TreeBuilder: a node's ancestor was never fed");
    m |= uint64_t{1} << f;
  }
  return m;
}

std::vector<TreeBuilder::FedNode> TreeBuilder::fed_nodes() const {
  std::vector<FedNode> out(static_cast<size_t>(fed_), FedNode{-1, -1});
  for (const Node& n : nodes_)
    if (n.fed >= 0)
      out[static_cast<size_t>(n.fed)] = {n.token, n.parent < 0 ? -1 : nodes_[static_cast<size_t>(n.parent)].fed};
  return out;
}

std::vector<int32_t> TreeBuilder::keep_order() const {
  // The spine (shallower first), then the others most probable first (EAGLE-2's re-ranking):
  // a child is never more probable than its parent (ties: shallower first), so every prefix
  // of this order is a tree.
  std::vector<int32_t> order(nodes_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const Node &x = nodes_[static_cast<size_t>(a)], &y = nodes_[static_cast<size_t>(b)];
    if (x.spine != y.spine) return x.spine;
    return x.score != y.score ? x.score > y.score : x.depth < y.depth;
  });
  return order;
}

size_t TreeBuilder::kept_count(const std::vector<int32_t>& order, double* expected_out, double* step_cost) const {
  const size_t n = std::min(order.size(), static_cast<size_t>(opts_.tree_nodes));
  size_t spine = 0;
  while (spine < n && nodes_[static_cast<size_t>(order[spine])].spine) ++spine;
  // Sized by cost: a node's path probability is the chance it is accepted, so the first i
  // nodes are expected to commit 1 + the sum of theirs per pass of relative cost
  // tree_cost[i]; the best i of that ratio from the whole spine up (the policy chose the
  // chain's depth) is kept.
  const std::span<const double> cost = opts_.tree_cost;
  if (cost.empty()) return n;
  const auto at = [&](size_t i) { return std::max(cost[std::min(i, cost.size() - 1)], 1e-9); };
  double expected = 1.0;
  for (size_t i = 0; i < spine; ++i) expected += std::exp(nodes_[static_cast<size_t>(order[i])].score);
  double best = expected / at(spine), best_expected = expected;
  size_t best_n = spine;
  for (size_t i = spine + 1; i <= n && i < cost.size(); ++i) {
    expected += std::exp(nodes_[static_cast<size_t>(order[i - 1])].score);
    if (const double v = expected / at(i); v > best) best = v, best_n = i, best_expected = expected;
  }
  if (expected_out) *expected_out = best_expected;
  if (step_cost) *step_cost = at(best_n + 1) / at(best_n) - 1.0;
  return best_n;
}

Proposal TreeBuilder::take() {
  std::vector<int32_t> keep(nodes_.size());
  std::iota(keep.begin(), keep.end(), 0);
  if (!sampled()) {
    keep = keep_order();
    const size_t n = kept_count(keep);
    keep.resize(n);
    std::sort(keep.begin(), keep.end());  // back in creation order: parents first
  }
  std::vector<int32_t> index(nodes_.size(), -1);
  Proposal p;
  for (int32_t n : keep) {
    const Node& nd = nodes_[static_cast<size_t>(n)];
    const int32_t parent = nd.parent < 0 ? -1 : index[static_cast<size_t>(nd.parent)];
    if (nd.parent >= 0 && parent < 0) continue;  // (cannot happen: see above) never an orphan
    index[static_cast<size_t>(n)] = static_cast<int32_t>(p.tokens.size());
    p.tokens.push_back(nd.token);
    p.parents.push_back(parent);
  }
  if (!row_dists_.empty()) {
    p.dists = std::move(row_dists_);
    p.dists.resize(nodes_.size() + 1);
  }
  if (!row_q_rows_.empty()) {  // (sampled trees keep every node: parents are nodes' own)
    for (int32_t par : p.parents) p.q_rows.push_back(row_q_rows_.at(static_cast<size_t>(par + 1)));
  }
  nodes_.clear();
  row_q_rows_.clear();
  reserved_.clear();
  return p;
}

}  // namespace tandem
