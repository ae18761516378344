// The step-level speculation budget (policies/step_budget.hpp): what it grants against the
// cost model's own arithmetic, written out here from the formula, and against every
// allocation of a small batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "policies/adaptive_policy.hpp"
#include "policies/step_budget.hpp"

using namespace tandem;

namespace {

CostModel batch_costs() {
  // Memory-bound up to ~8 rows, then each row costs more, compute-bound beyond 64.
  PassCurve t{1, {1, 2, 4, 8, 16, 32, 64, 128}, {10, 10.3, 10.8, 12, 14, 18, 26, 52}};
  PassCurve d{1, {1, 2, 4, 8, 16, 32, 64, 128}, {1, 1.03, 1.08, 1.2, 1.4, 1.8, 2.6, 5.2}};
  return CostModel("test-ms", {t}, {d});  // a key: milliseconds, so corrections apply
}

BudgetOptions throughput_only() {
  BudgetOptions o;
  o.latency_slack = -1.0;
  return o;
}

// The step's predicted time and expected tokens for an allocation, from the formula.
struct Eval {
  double ms, tokens;
};
Eval evaluate(const CostModel& m, const std::vector<BudgetWish>& w, const std::vector<int32_t>& k, int32_t other_tokens,
              int32_t other_streams) {
  int32_t drafts = 0, passes = 0;
  double tokens = other_streams;
  for (size_t i = 0; i < w.size(); ++i) {
    drafts += k[i];
    passes = std::max(passes, w[i].draft_free ? 0 : k[i]);
    tokens += CostModel::expected_tokens(w[i].alpha, k[i]);
  }
  double ms = m.target_ms(other_tokens + drafts);
  for (int32_t j = 0; j < passes; ++j) {
    int32_t fed = 0;
    for (size_t i = 0; i < w.size(); ++i)
      if (!w[i].draft_free && k[i] > j) fed += j == 0 ? std::max(1, w[i].catch_up) : 1;
    ms += m.draft_ms(fed);
  }
  return {ms, tokens};
}

bool within_latency(const std::vector<BudgetWish>& w, const std::vector<int32_t>& k, double ms, double plain_ms,
                    int32_t other_streams, double slack) {
  double least = other_streams > 0 ? 1.0 : 1e9;
  for (size_t i = 0; i < w.size(); ++i) least = std::min(least, CostModel::expected_tokens(w[i].alpha, k[i]));
  return ms / least <= (1.0 + slack) * plain_ms + 1e-9;
}

}  // namespace

TEST(StepBudget, DraftPassesFollowTheProposersBatchedPasses) {
  const std::vector<BudgetWish> w = {{4, 0.8, 1, false}, {2, 0.8, 3, false}, {3, 0.8, 1, true}, {1, 0.8, 2, false}};
  // The first pass feeds each drafting sequence's catch-up, the j-th one token for each
  // sequence with a j-th draft; n-gram drafts run no pass.
  EXPECT_EQ(StepBudget::draft_passes(w, std::vector<int32_t>{4, 2, 3, 1}), (std::vector<int32_t>{6, 2, 1, 1}));
  EXPECT_EQ(StepBudget::draft_passes(w, std::vector<int32_t>{0, 0, 3, 0}), std::vector<int32_t>{});
}

// One sequence alone: the budget draws the same line as the adaptive policy's best_k, whose
// S(α, k) = E / (k·c + r(k)) is the same step arithmetic for a batch of one.
TEST(StepBudget, OneSequenceGetsWhatItsPolicyWouldChooseAlone) {
  const CostModel m = batch_costs();
  AdaptiveConfig c;
  c.measure_overhead = false;
  const AdaptivePolicy policy(m, c);
  const StepBudget budget(throughput_only());
  int32_t distinct = 0, last = -1;
  for (double a = 0.0; a <= 1.0001; a += 0.05) {
    const std::vector<BudgetWish> w = {{8, a, 1, false}};
    const StepPlan p = budget.plan(m, w, 1, 0);
    EXPECT_EQ(p.k[0], policy.best_k(a, 8, 1)) << "alpha " << a;
    distinct += p.k[0] != last;
    last = p.k[0];
  }
  EXPECT_GE(distinct, 4);  // the range goes from off to long drafts
}

TEST(StepBudget, DraftsShrinkAndStopAsTheBatchGrows) {
  const CostModel m = batch_costs();
  const StepBudget budget(throughput_only());
  int32_t prev = 1000;
  std::vector<int32_t> per_seq;
  for (int32_t b : {1, 2, 4, 8, 16, 32, 64}) {
    const std::vector<BudgetWish> w(static_cast<size_t>(b), BudgetWish{8, 0.8, 1, false});
    const StepPlan p = budget.plan(m, w, b, 0);
    const int32_t most = *std::max_element(p.k.begin(), p.k.end());
    EXPECT_LE(most, prev) << "batch " << b;
    EXPECT_EQ(p.granted, std::accumulate(p.k.begin(), p.k.end(), 0));
    prev = most;
    per_seq.push_back(most);
  }
  EXPECT_GE(per_seq.front(), 3);
  EXPECT_EQ(per_seq.back(), 0);
}

// Small batches, random acceptances, lags and costs: whatever the plan grants pays by the
// cost model's own formula (at least min_gain over plain decoding), keeps every stream's
// time per token within the latency rule, and comes close to the best of all allocations.
TEST(StepBudget, GrantsOnlyWhatTheCostModelSaysPays) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int32_t granted_some = 0, granted_none = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    // Target: flat for `flat` tokens, then `slope` per token; draft: a share of it.
    const int32_t flat = 1 + static_cast<int32_t>(u(rng) * 12);
    const double slope = 0.05 + u(rng) * 0.6, share = 0.02 + u(rng) * 0.5;
    PassCurve t{1, {}, {}}, d{1, {}, {}};
    for (int32_t n = 1; n <= 64; ++n) {
      t.n.push_back(n);
      d.n.push_back(n);
      t.ms.push_back(10.0 + slope * 10.0 * std::max(0, n - flat));
      d.ms.push_back(share * t.ms.back());
    }
    const CostModel m("rand", {t}, {d});
    const size_t n = 1 + static_cast<size_t>(u(rng) * 3);
    std::vector<BudgetWish> w;
    for (size_t i = 0; i < n; ++i)
      w.push_back({1 + static_cast<int32_t>(u(rng) * 3), u(rng), 1 + static_cast<int32_t>(u(rng) * 3), u(rng) < 0.2});
    const int32_t other_streams = u(rng) < 0.3 ? 1 : 0;
    const int32_t other = static_cast<int32_t>(n) + other_streams + (u(rng) < 0.3 ? 16 : 0);
    BudgetOptions o;
    o.latency_slack = u(rng) < 0.5 ? -1.0 : 0.1;
    const StepBudget budget(o);
    const StepPlan p = budget.plan(m, w, other, other_streams);
    const double streams = static_cast<double>(n + static_cast<size_t>(other_streams));
    const double plain_ms = m.target_ms(other);
    const double plain_rate = streams / plain_ms;
    ASSERT_NEAR(p.plain_ms, plain_ms, 1e-9);
    for (size_t i = 0; i < n; ++i) ASSERT_LE(p.k[i], w[i].k_max);
    const Eval e = evaluate(m, w, p.k, other, other_streams);
    if (p.granted > 0) {
      ++granted_some;
      EXPECT_GE(e.tokens / e.ms, (1.0 + o.min_gain) * plain_rate - 1e-12) << "trial " << trial;
      EXPECT_NEAR(p.step_ms, e.ms, 1e-9);
      EXPECT_NEAR(p.gain, e.tokens / e.ms / plain_rate, 1e-9);
      if (o.latency_slack >= 0.0) {
        EXPECT_TRUE(within_latency(w, p.k, e.ms, plain_ms, other_streams, o.latency_slack)) << "trial " << trial;
      }
    } else {
      ++granted_none;
    }
    // Every allocation of this small batch: none within the rules is much better.
    std::vector<int32_t> k(n, 0);
    double best = plain_rate;
    for (;;) {
      const Eval x = evaluate(m, w, k, other, other_streams);
      if (o.latency_slack < 0.0 || within_latency(w, k, x.ms, plain_ms, other_streams, o.latency_slack))
        best = std::max(best, x.tokens / x.ms);
      size_t i = 0;
      while (i < n && ++k[i] > w[i].k_max) k[i++] = 0;
      if (i == n) break;
    }
    const double got = p.granted > 0 ? e.tokens / e.ms : plain_rate;
    EXPECT_GE(got, 0.97 * best) << "trial " << trial << [&] {
      std::string d;
      for (size_t i = 0; i < n; ++i)
        d += " [kmax " + std::to_string(w[i].k_max) + " a " + std::to_string(w[i].alpha) + " cu " +
             std::to_string(w[i].catch_up) + (w[i].draft_free ? " free" : "") + " k " + std::to_string(p.k[i]) + "]";
      return d + " other " + std::to_string(other) + " os " + std::to_string(other_streams) + " slack " +
             std::to_string(o.latency_slack) + " flat " + std::to_string(flat) + " slope " + std::to_string(slope) +
             " share " + std::to_string(share);
    }();
  }
  EXPECT_GT(granted_some, 50);
  EXPECT_GT(granted_none, 50);
}

// A stream that drafts nothing waits for the others' drafts: under the latency rule they may
// lengthen the step only by the slack; without it, throughput alone decides.
TEST(StepBudget, AStreamThatDraftsNothingIsNotSlowedByTheOthers) {
  // A draft pass costs 30% of a step, verification is free up to 16 tokens.
  PassCurve t{1, {1, 16, 64}, {10, 10, 40}};
  PassCurve d{1, {1, 16, 64}, {3, 3, 12}};
  const CostModel m("k", {t}, {d});
  const std::vector<BudgetWish> w = {{4, 0.9, 1, false}, {4, 0.9, 1, false}, {4, 0.9, 1, false}, {4, 0.0, 1, false}};
  const StepPlan loose = StepBudget(throughput_only()).plan(m, w, 4, 0);
  EXPECT_GT(loose.k[0], 0);
  EXPECT_EQ(loose.k[3], 0);  // its drafts yield nothing
  const StepPlan strict = StepBudget().plan(m, w, 4, 0);
  EXPECT_EQ(strict.granted, 0);
  // The same with the acceptance that makes every stream faster: granted under the rule.
  std::vector<BudgetWish> all = w;
  all[3].alpha = 0.9;
  const StepPlan ok = StepBudget().plan(m, all, 4, 0);
  EXPECT_GT(ok.granted, 0);
  for (int32_t k : ok.k) EXPECT_GT(k, 0);
}

TEST(StepBudget, TheBetterDraftGetsTheTokensFirst) {
  const CostModel m = batch_costs();
  const std::vector<BudgetWish> w = {{8, 0.3, 1, false}, {8, 0.95, 1, false}};
  const StepPlan p = StepBudget(throughput_only()).plan(m, w, 2, 0);
  EXPECT_GT(p.k[1], p.k[0]);
  EXPECT_GE(p.k[1], 3);
}

// Measured steps that take twice what the model says double every prediction of that
// model; a model given as ratios (no milliseconds) is taken as it is.
TEST(StepBudget, CorrectionsFollowTheMeasuredSteps) {
  const CostModel m = batch_costs();
  StepBudget b;
  for (int i = 0; i < 60; ++i) b.observe_target(m, 8, 2.0 * m.target_ms(8));
  EXPECT_NEAR(b.target_correction(), 2.0, 1e-6);
  EXPECT_NEAR(b.target_ms(m, 4), 2.0 * m.target_ms(4), 1e-6);
  const std::vector<int32_t> passes = {4, 4};
  for (int i = 0; i < 60; ++i) b.observe_draft(m, passes, 0.5 * (m.draft_ms(4) * 2));
  EXPECT_NEAR(b.draft_correction(), 0.5, 1e-6);
  StepBudget r;
  const CostModel ratios = CostModel::from_ratios(0.3, {1.0, 1.1, 1.2});
  r.observe_target(ratios, 2, 55.0);
  EXPECT_EQ(r.target_correction(), 1.0);
}

// Nor do drafts make a step longer than the scheduler's step-time target, unless the plain
// step already is longer.
TEST(StepBudget, DraftsKeepTheStepWithinTheStepTimeTarget) {
  PassCurve t{1, {1, 8, 64}, {10, 12, 40}};
  PassCurve d{1, {1, 8, 64}, {1, 1.2, 4}};
  const CostModel m("k", {t}, {d});
  const std::vector<BudgetWish> w(4, BudgetWish{8, 0.95, 1, false});
  BudgetOptions o = throughput_only();
  const StepPlan free = StepBudget(o).plan(m, w, 4, 0);
  ASSERT_GT(free.step_ms, 14.0);
  o.max_step_ms = 14.0;
  const StepPlan capped = StepBudget(o).plan(m, w, 4, 0);
  EXPECT_GT(capped.granted, 0);
  EXPECT_LT(capped.granted, free.granted);
  EXPECT_LE(capped.step_ms, 14.0 + 1e-9);
  o.max_step_ms = 5.0;  // below the plain step: drafts may not lengthen it at all
  const StepPlan tight = StepBudget(o).plan(m, w, 4, 0);
  EXPECT_LE(tight.step_ms, tight.plain_ms + 1e-9);
}
