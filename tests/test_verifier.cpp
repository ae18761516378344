// The verifiers on synthetic distributions: greedy rules, and the rejection sampler's
// output distribution equals the target's (chi-square with fixed seeds, shown able to fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>

#include "tests/support/stats.hpp"
#include "kernels/backend.hpp"
#include "verify/step_verifier.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {

Distribution dist(std::vector<int32_t> ids, std::vector<float> probs) {
  return test::distribution(std::move(ids), std::move(probs));
}

TEST(VerifyGreedy, AcceptsMatchingPrefixThenEmitsArgmax) {
  const std::vector<Distribution> p = {dist({5}, {1}), dist({7}, {1}), dist({9}, {1}), dist({3}, {1})};
  auto pf = [&](int32_t i) { return p[static_cast<size_t>(i)]; };
  const std::vector<int32_t> all = {5, 7, 9};
  VerifyResult r = verify_greedy(all, pf);
  EXPECT_EQ(r.n_accepted, 3);
  EXPECT_TRUE(r.all_accepted);
  EXPECT_EQ(r.next_token, 3);  // bonus
  const std::vector<int32_t> miss = {5, 8, 9};
  r = verify_greedy(miss, pf);
  EXPECT_EQ(r.n_accepted, 1);
  EXPECT_FALSE(r.all_accepted);
  EXPECT_EQ(r.next_token, 7);  // the correction
  r = verify_greedy({}, pf);     // no draft: plain decoding
  EXPECT_EQ(r.n_accepted, 0);
  EXPECT_EQ(r.next_token, 5);
}

TEST(VerifyStochastic, ResidualHasOnlyTheExcessMass) {
  const Distribution p = dist({0, 1, 2}, {0.5f, 0.3f, 0.2f});
  const Distribution q = dist({0, 1, 2}, {0.7f, 0.1f, 0.2f});  // residual: only token 1
  Rng rng(1);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sample_residual(p, q, rng), 1);
}

// Token distribution of the first output of one verification step with a draft token
// drawn from q: must be p, whatever q is.
std::map<int64_t, int64_t> first_token_counts(const Distribution& p, const Distribution* q, int32_t fixed_draft,
                                              int64_t n, uint64_t seed, bool break_it = false) {
  std::map<int64_t, int64_t> counts;
  Rng rng(seed);
  for (int64_t t = 0; t < n; ++t) {
    const int32_t x = q ? sample(*q, rng) : fixed_draft;
    const std::vector<int32_t> draft = {x};
    auto pf = [&](int32_t) { return p; };
    VerifyResult r;
    if (break_it) {
      // A wrong verifier with the right acceptance rule that resamples a rejected draft from
      // p instead of the residual (p - q)+: it emits only tokens of p's support, so only the
      // statistic can tell.
      const double accept = std::min(1.0, static_cast<double>(p.prob(x)) / static_cast<double>(q->prob(x)));
      r.n_accepted = rng.uniform() < accept ? 1 : 0;
      if (r.n_accepted == 0) r.next_token = sample(p, rng);
    } else if (q) {
      DistFn qf = [&](int32_t) { return *q; };
      r = verify_stochastic(draft, pf, &qf, rng);
    } else {
      r = verify_stochastic(draft, pf, nullptr, rng);
    }
    ++counts[r.n_accepted == 1 ? x : r.next_token];
  }
  return counts;
}

double pvalue_against(const std::map<int64_t, int64_t>& counts, const Distribution& p, int64_t n) {
  std::vector<int64_t> obs;
  std::vector<double> exp;
  for (size_t i = 0; i < p.size(); ++i) {
    auto it = counts.find(p.ids[i]);
    obs.push_back(it == counts.end() ? 0 : it->second);
    exp.push_back(p.probs[i]);
  }
  int64_t outside = n;
  for (auto c : obs) outside -= c;
  EXPECT_EQ(outside, 0) << "tokens outside p's support were emitted";
  return test::chi2_sf(test::chi2_statistic(obs, exp, n), static_cast<int>(p.size()) - 1);
}

constexpr double kAlpha = 1e-4;  // fixed seeds make each outcome deterministic
constexpr int64_t kDraws = 200000;

TEST(VerifyStochastic, OutputFollowsTargetForSampledDraft) {
  const Distribution p = dist({0, 1, 2, 3, 4, 5}, {0.30f, 0.25f, 0.20f, 0.15f, 0.07f, 0.03f});
  const Distribution q = dist({0, 2, 4, 6}, {0.1f, 0.5f, 0.3f, 0.1f});  // disagrees a lot, even on the support
  const auto counts = first_token_counts(p, &q, -1, kDraws, 11);
  EXPECT_GT(pvalue_against(counts, p, kDraws), kAlpha);
  // The same χ² catches a verifier that resamples from p instead of the residual (its
  // output stays in p's support: the statistic alone must see it).
  const auto wrong = first_token_counts(p, &q, -1, kDraws, 11, true);
  EXPECT_LT(pvalue_against(wrong, p, kDraws), kAlpha);
}

TEST(VerifyStochastic, OutputFollowsTargetForDeterministicDraft) {
  const Distribution p = dist({0, 1, 2, 3}, {0.4f, 0.3f, 0.2f, 0.1f});
  for (int32_t x : {0, 2, 3, 9}) {  // 9 is outside p's support: always rejected
    const auto counts = first_token_counts(p, nullptr, x, kDraws, 20 + x);
    EXPECT_GT(pvalue_against(counts, p, kDraws), kAlpha) << "draft token " << x;
  }
}

// A miniature decode loop (draft k tokens, verify, commit) where p and q depend on the
// absolute position: each output position's marginal must follow p at that position.
TEST(VerifyStochastic, EveryPositionFollowsTargetAcrossSteps) {
  const int kLen = 5, k = 3;
  std::vector<Distribution> p, q;
  for (int pos = 0; pos < kLen + k + 1; ++pos) {
    p.push_back(dist({0, 1, 2, 3}, {0.1f + 0.05f * (pos % 3), 0.4f, 0.3f - 0.05f * (pos % 3), 0.2f}));
    q.push_back(dist({0, 1, 2, 3}, {0.4f, 0.1f, 0.25f, 0.25f}));
  }
  const int64_t runs = 60000;
  std::vector<std::map<int64_t, int64_t>> counts(kLen);
  Rng rng(99);
  for (int64_t r = 0; r < runs; ++r) {
    std::vector<int32_t> out;
    while (static_cast<int>(out.size()) < kLen) {
      const int base = static_cast<int>(out.size());
      std::vector<int32_t> draft;
      for (int i = 0; i < k; ++i) draft.push_back(sample(q[base + i], rng));
      auto pf = [&](int32_t i) { return p[static_cast<size_t>(base + i)]; };
      DistFn qf = [&](int32_t i) { return q[static_cast<size_t>(base + i)]; };
      const VerifyResult v = verify_stochastic(draft, pf, &qf, rng);
      for (int i = 0; i < v.n_accepted; ++i) out.push_back(draft[static_cast<size_t>(i)]);
      out.push_back(v.next_token);
    }
    for (int j = 0; j < kLen; ++j) ++counts[j][out[static_cast<size_t>(j)]];
  }
  for (int j = 0; j < kLen; ++j) EXPECT_GT(pvalue_against(counts[j], p[static_cast<size_t>(j)], runs), kAlpha) << j;
}

// The one entry point: the CPU backend verifies every sequence on the host; the host's verdict
// follows the request's mode (greedy needs no randomness, rejection sampling its stream).
TEST(StepVerifier, TheHostVerifiesWhereTheBackendCannotAndPicksTheRequestsVerifier) {
  auto be = kernels::make_cpu_backend(1);
  const StepVerifier v(*be);
  EXPECT_FALSE(v.on_device(true));
  EXPECT_FALSE(v.on_device(false));

  const Distribution p = dist({4, 5, 6}, {0.7f, 0.2f, 0.1f});
  const DistFn pf = [&](int32_t) { return p; };
  const std::vector<int32_t> drafts = {4, 5};
  const Distribution argmax = dist({4}, {1.0f});
  const DistFn af = [&](int32_t) { return argmax; };
  HostStep greedy;
  greedy.drafts = drafts;
  greedy.target = &af;
  greedy.greedy = true;
  const VerifyResult g = verify_host(greedy);
  EXPECT_EQ(g.n_accepted, 1);
  EXPECT_EQ(g.next_token, 4);

  HostStep rejection = greedy;
  rejection.target = &pf;
  rejection.greedy = false;
  EXPECT_THROW(verify_host(rejection), std::invalid_argument) << "rejection sampling without a random stream";
  Rng rng(5);
  rejection.rng = &rng;
  std::map<int64_t, int64_t> first;
  for (int i = 0; i < 20000; ++i) {
    const VerifyResult r = verify_host(rejection);
    ++first[r.n_accepted > 0 ? drafts[0] : r.next_token];
  }
  EXPECT_GT(pvalue_against(first, p, 20000), kAlpha);  // point-mass drafts: the first token follows p

  HostStep none;
  EXPECT_THROW(verify_host(none), std::invalid_argument);
}

}  // namespace
}  // namespace tandem
