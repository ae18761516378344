// Tree verification (verify/tree_verifier.hpp) on synthetic distributions: a chain is a tree
// of width 1 (the chain verifiers' verdicts from the same random numbers); greedy and coupled
// walks follow the target's token; recursive rejection sampling over siblings drawn without
// replacement (and over deterministic siblings) emits the target's joint distribution over
// two positions, which the same χ² shows it can tell from a biased verifier.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "tests/support/stats.hpp"
#include "verify/tree_verifier.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {

Distribution dist(std::vector<int32_t> ids, std::vector<float> probs) {
  return test::distribution(std::move(ids), std::move(probs));
}

// Target and draft over 5 tokens; the second position's depend on the first token.
Distribution p1() { return dist({0, 1, 2, 3, 4}, {0.32f, 0.26f, 0.2f, 0.14f, 0.08f}); }
Distribution p2(int32_t x1) {
  const float s = 0.04f * static_cast<float>(x1);
  return dist({0, 1, 2, 3, 4}, {0.1f + s, 0.3f - s, 0.25f, 0.2f, 0.15f});
}
Distribution q1() { return dist({0, 1, 2, 3, 4}, {0.1f, 0.45f, 0.05f, 0.3f, 0.1f}); }
Distribution q2(int32_t x1) {
  const float s = 0.03f * static_cast<float>(x1);
  return dist({0, 1, 2, 3, 4}, {0.4f - s, 0.1f, 0.1f + s, 0.2f, 0.2f});
}

// Children drawn from q without replacement, as the tree drafter draws them.
std::vector<int32_t> draw_without_replacement(Distribution q, int m, Rng& rng) {
  std::vector<int32_t> out;
  for (int j = 0; j < m && !q.ids.empty(); ++j) {
    out.push_back(sample(q, rng));
    q = remove_token(q, out.back());
  }
  return out;
}
// The m most likely tokens of q (deterministic children).
std::vector<int32_t> top_tokens(const Distribution& q, int m) {
  return std::vector<int32_t>(q.ids.begin(), q.ids.begin() + std::min<size_t>(static_cast<size_t>(m), q.size()));
}

// One tree step at position 0 (root's children: m1 of them, each with m2 children), then,
// if the walk stopped at depth 0, a plain draw of the second token: the first two output
// tokens as x1 * 5 + x2.
int64_t two_tokens(bool sampled, int m1, int m2, Rng& rng) {
  std::vector<int32_t> drafts, parents;
  const std::vector<int32_t> level1 = sampled ? draw_without_replacement(q1(), m1, rng) : top_tokens(q1(), m1);
  for (int32_t x : level1) drafts.push_back(x), parents.push_back(-1);
  const size_t n1 = drafts.size();
  for (size_t i = 0; i < n1; ++i) {
    const int32_t x1 = drafts[i];
    const std::vector<int32_t> kids = sampled ? draw_without_replacement(q2(x1), m2, rng) : top_tokens(q2(x1), m2);
    for (int32_t x : kids) drafts.push_back(x), parents.push_back(static_cast<int32_t>(i));
  }
  auto token_of_row = [&](int32_t r) { return r == 0 ? -1 : drafts[static_cast<size_t>(r - 1)]; };
  DistFn target = [&](int32_t r) { return r == 0 ? p1() : p2(token_of_row(r)); };
  DistFn draft = [&](int32_t r) { return r == 0 ? q1() : q2(token_of_row(r)); };
  const TreeVerdict v = verify_tree_stochastic(drafts, parents, target, sampled ? &draft : nullptr, rng, 0);
  std::vector<int32_t> out;
  for (int32_t n : v.path) out.push_back(drafts[static_cast<size_t>(n)]);
  out.push_back(v.next_token);
  if (out.size() < 2) out.push_back(sample(p2(out[0]), rng));
  return out[0] * 5 + out[1];
}

double joint_pvalue(const std::map<int64_t, int64_t>& counts, int64_t n) {
  std::vector<int64_t> obs;
  std::vector<double> exp;
  const Distribution a = p1();
  for (size_t i = 0; i < a.size(); ++i) {
    const Distribution b = p2(a.ids[i]);
    for (size_t j = 0; j < b.size(); ++j) {
      const auto it = counts.find(a.ids[i] * 5 + b.ids[j]);
      obs.push_back(it == counts.end() ? 0 : it->second);
      exp.push_back(static_cast<double>(a.probs[i]) * b.probs[j]);
    }
  }
  return test::chi2_sf(test::chi2_statistic(obs, exp, n), static_cast<int>(obs.size()) - 1);
}

constexpr double kAlpha = 1e-4;  // fixed seeds make each outcome deterministic
constexpr int64_t kRuns = 120000;

std::map<int64_t, int64_t> run_many(bool sampled, int m1, int m2, uint64_t seed) {
  Rng rng(seed);
  std::map<int64_t, int64_t> counts;
  for (int64_t r = 0; r < kRuns; ++r) ++counts[two_tokens(sampled, m1, m2, rng)];
  return counts;
}

TEST(TreeVerifier, SampledSiblingsFollowTheTargetsJointDistribution) {
  for (auto [m1, m2] : {std::pair{3, 2}, std::pair{1, 3}, std::pair{5, 1}}) {
    EXPECT_GT(joint_pvalue(run_many(true, m1, m2, 7 + m1), kRuns), kAlpha) << m1 << "x" << m2;
  }
}

TEST(TreeVerifier, DeterministicSiblingsFollowTheTargetsJointDistribution) {
  for (auto [m1, m2] : {std::pair{2, 2}, std::pair{4, 3}}) {
    EXPECT_GT(joint_pvalue(run_many(false, m1, m2, 31 + m1), kRuns), kAlpha) << m1 << "x" << m2;
  }
}

// The twin: a bias injected at the second position (depth 1) must be seen.
TEST(TreeVerifier, TheSameTestCatchesABiasedVerifier) {
  inject_verifier_bias({1, 0.05f});
  const auto sampled = run_many(true, 3, 2, 8);
  const auto fixed = run_many(false, 2, 2, 32);
  inject_verifier_bias({});
  EXPECT_LT(joint_pvalue(sampled, kRuns), kAlpha);
  EXPECT_LT(joint_pvalue(fixed, kRuns), kAlpha);
}

// A chain is a tree of width 1: each tree verifier gives the chain verifier's verdict from
// the same random numbers.
TEST(TreeVerifier, AChainIsVerifiedAsTheChainVerifiersDo) {
  Rng gen(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> drafts, parents;
    std::vector<Distribution> ps, qs;
    const int k = 1 + trial % 4;
    for (int i = 0; i <= k; ++i) {
      ps.push_back(i % 2 ? p2(i % 5) : p1());
      qs.push_back(i % 2 ? q2(i % 5) : q1());
    }
    for (int i = 0; i < k; ++i) {
      drafts.push_back(sample(qs[static_cast<size_t>(i)], gen));
      parents.push_back(i - 1);
    }
    DistFn pf = [&](int32_t i) { return ps[static_cast<size_t>(i)]; };
    DistFn qf = [&](int32_t i) { return qs[static_cast<size_t>(i)]; };
    auto same = [&](const VerifyResult& c, const TreeVerdict& t) {
      ASSERT_EQ(static_cast<int32_t>(t.path.size()), c.n_accepted);
      for (int32_t i = 0; i < c.n_accepted; ++i) EXPECT_EQ(t.path[static_cast<size_t>(i)], i);
      EXPECT_EQ(t.next_token, c.next_token);
      EXPECT_EQ(t.leaf, c.all_accepted);
    };
    same(verify_greedy(drafts, pf), verify_tree_greedy(drafts, parents, pf));
    const PositionNoise noise(trial);
    same(verify_coupled(drafts, pf, noise, 40), verify_tree_coupled(drafts, parents, pf, noise, 40));
    Rng a(trial), b(trial);
    same(verify_stochastic(drafts, pf, &qf, a, 40), verify_tree_stochastic(drafts, parents, pf, &qf, b, 40));
    Rng c(trial), d(trial);
    same(verify_stochastic(drafts, pf, nullptr, c, 40), verify_tree_stochastic(drafts, parents, pf, nullptr, d, 40));
  }
}

TEST(TreeVerifier, GreedyAndCoupledWalksFollowTheTargetsToken) {
  // Root children 3, 1 (node 0, 1); under node 1: 2, 4 (nodes 2, 3); under node 3: 0 (node 4).
  const std::vector<int32_t> drafts = {3, 1, 2, 4, 0}, parents = {-1, -1, 1, 1, 3};
  // Greedy targets: argmax 1 at the root, 4 after node 1, 0 after node 3, 2 after node 4.
  const std::vector<int32_t> argmax = {1, 0, 4, 0, 0, 2};  // by row
  DistFn pf = [&](int32_t r) {
    const int32_t a = argmax[static_cast<size_t>(r)];
    return dist({a}, {1.0f});
  };
  const TreeVerdict v = verify_tree_greedy(drafts, parents, pf);
  EXPECT_EQ(v.path, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(v.next_token, 2);
  EXPECT_TRUE(v.leaf);
  // A miss at the root: nothing accepted, the argmax emitted.
  DistFn miss = [&](int32_t) { return dist({4}, {1.0f}); };
  const TreeVerdict m = verify_tree_greedy(drafts, parents, miss);
  EXPECT_TRUE(m.path.empty());
  EXPECT_EQ(m.next_token, 4);
  EXPECT_FALSE(m.leaf);
  // Coupled: whatever the tree, each emitted token is the Gumbel-max token at its position.
  const PositionNoise noise(3);
  DistFn flat = [&](int32_t r) { return r == 0 ? p1() : p2(drafts[static_cast<size_t>(r - 1)]); };
  const TreeVerdict c = verify_tree_coupled(drafts, parents, flat, noise, 10);
  std::vector<int32_t> out;
  for (int32_t n : c.path) out.push_back(drafts[static_cast<size_t>(n)]);
  out.push_back(c.next_token);
  EXPECT_EQ(out[0], gumbel_argmax(p1(), noise, 10));
  for (size_t i = 1; i < out.size(); ++i) EXPECT_EQ(out[i], gumbel_argmax(p2(out[i - 1]), noise, 10 + static_cast<int64_t>(i)));
}

TEST(TreeVerifier, ATreeWhoseParentsComeLaterIsRefused) {
  const std::vector<int32_t> drafts = {1, 2};
  DistFn pf = [&](int32_t) { return p1(); };
  EXPECT_THROW(verify_tree_greedy(drafts, std::vector<int32_t>{1, -1}, pf), std::invalid_argument);
  EXPECT_THROW(verify_tree_greedy(drafts, std::vector<int32_t>{-1}, pf), std::invalid_argument);
}

}  // namespace
}  // namespace tandem
