#include "draft/token_tree.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

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

void TreeBuilder::expand(int32_t node, std::span<const float> logits) {
  const int32_t depth = node < 0 ? 0 : nodes_.at(static_cast<size_t>(node)).depth;
  if (node >= 0) nodes_[static_cast<size_t>(node)].expanded = true;
  const int32_t room = std::min<int32_t>(opts_.tree_width, opts_.tree_nodes - static_cast<int32_t>(nodes_.size()));
  if (depth >= opts_.max_tokens || room <= 0) return;
  const size_t shared = opts_.vocab > 0 ? std::min(logits.size(), static_cast<size_t>(opts_.vocab)) : logits.size();
  const std::span<const float> row = logits.first(shared);
  const SamplingParams& sp = *opts_.sampling;
  const double parent_score = node < 0 ? 0.0 : nodes_[static_cast<size_t>(node)].score;
  std::vector<std::pair<int32_t, double>> kids;  // token, log probability under the draft
  if (sp.greedy()) {
    // The most likely tokens of the draft at temperature 1 (its final distribution is a
    // point mass); NaN logits never win.
    std::vector<int32_t> ids(row.size());
    std::iota(ids.begin(), ids.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      const float x = std::isnan(row[a]) ? -INFINITY : row[a], y = std::isnan(row[b]) ? -INFINITY : row[b];
      return x > y || (x == y && a < b);
    };
    const auto n = std::min<size_t>(static_cast<size_t>(room), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(n), ids.end(), better);
    const float mx = row[static_cast<size_t>(ids[0])];
    if (!std::isfinite(mx)) return;  // nothing possible
    double z = 0.0;
    for (float x : row)
      if (x > -INFINITY) z += std::exp(static_cast<double>(x - mx));
    for (size_t i = 0; i < n; ++i) {
      const float x = row[static_cast<size_t>(ids[i])];
      if (!(x > -INFINITY)) break;
      kids.push_back({ids[i], static_cast<double>(x - mx) - std::log(z)});
    }
  } else {
    const std::vector<int32_t> path = path_tokens(node);
    std::vector<int32_t> history(context_.begin(), context_.end());
    history.insert(history.end(), path.begin(), path.end());
    Distribution q = make_distribution(row, sp, history);
    auto logq = [&](int32_t t) { return std::log(static_cast<double>(q.prob(t))); };
    if (opts_.coupled) {
      const int64_t position = static_cast<int64_t>(context_.size()) + depth;
      for (int32_t t : gumbel_top(q, *opts_.coupled, position, static_cast<size_t>(room))) kids.push_back({t, logq(t)});
    } else {
      Distribution left = q;  // children drawn without replacement
      for (int32_t j = 0; j < room && !left.ids.empty(); ++j) {
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
  for (const auto& [t, lp] : kids) {
    Node c;
    c.token = t;
    c.parent = node;
    c.depth = depth + 1;
    c.score = parent_score + lp;
    nodes_.push_back(c);
  }
}

std::vector<int32_t> TreeBuilder::take_frontier() {
  const int32_t d = grown_depth_ + 1;
  std::vector<int32_t> cand;
  if (d < opts_.max_tokens && static_cast<int32_t>(nodes_.size()) < opts_.tree_nodes)
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].depth == d && !nodes_[i].expanded && nodes_[i].fed < 0) cand.push_back(static_cast<int32_t>(i));
  std::stable_sort(cand.begin(), cand.end(), [&](int32_t a, int32_t b) {
    return nodes_[static_cast<size_t>(a)].score > nodes_[static_cast<size_t>(b)].score;
  });
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

std::vector<int32_t> TreeBuilder::fed_chain_tokens() const {
  std::vector<int32_t> by_feed(static_cast<size_t>(fed_), -1);
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].fed >= 0) by_feed[static_cast<size_t>(nodes_[i].fed)] = static_cast<int32_t>(i);
  std::vector<int32_t> out;
  int32_t prev = -1;
  for (int32_t n : by_feed) {
    if (nodes_[static_cast<size_t>(n)].parent != prev) break;
    out.push_back(nodes_[static_cast<size_t>(n)].token);
    prev = n;
  }
  return out;
}

Proposal TreeBuilder::take() {
  Proposal p;
  for (const Node& n : nodes_) {
    p.tokens.push_back(n.token);
    p.parents.push_back(n.parent);
  }
  if (!row_dists_.empty()) {
    p.dists = std::move(row_dists_);
    p.dists.resize(nodes_.size() + 1);
  }
  nodes_.clear();
  return p;
}

}  // namespace tandem
