// Replaying policies on recorded acceptance (policies/replay.hpp): the agreement a recorded
// run implies at every position, and the steps and cost a policy gets from it.
#include <gtest/gtest.h>

#include <vector>

#include "policies/adaptive_policy.hpp"
#include "policies/replay.hpp"

namespace tandem {
namespace {

// k = 4: two accepted then a rejection; all four accepted; a plain step; one rejected at once.
const std::vector<SpeculativeStep> kSteps = {{4, 2}, {4, 4}, {0, 0}, {4, 0}};
constexpr int32_t kGenerated = 1 + 3 + 5 + 1 + 1;

TEST(PolicyReplay, AgreementFollowsFromTheRecordedSteps) {
  const auto t = AgreementTrace::from_steps(kSteps, kGenerated, 7);
  EXPECT_EQ(t.prompt_tokens, 7);
  ASSERT_EQ(t.generated(), kGenerated);
  // Position 1 (after the prompt's token): 2 agree, the third does not; inside the run the
  // same disagreement is 1 and 0 tokens away.
  const std::vector<int32_t> agree = {0, 2, 1, 0, 4, 3, 2, 1, 0, 0, 0};
  const std::vector<uint8_t> exact = {0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(t.agree, agree);
  EXPECT_EQ(t.exact, exact);
}

TEST(PolicyReplay, StepsThatDoNotMatchTheRunAreRefused) {
  EXPECT_THROW(AgreementTrace::from_steps(kSteps, kGenerated + 1, 7), std::invalid_argument);
  EXPECT_THROW(AgreementTrace::from_steps(kSteps, kGenerated - 1, 7), std::invalid_argument)
      << "a last step that added nothing";
  // An end-of-generation token inside the last step ends the output before its end.
  const std::vector<SpeculativeStep> cut = {{4, 2}, {4, 4}};
  EXPECT_EQ(AgreementTrace::from_steps(cut, 6, 7).generated(), 6);
  EXPECT_THROW(AgreementTrace::from_steps(cut, 4, 7), std::invalid_argument) << "the steps before the last cover more";
  const std::vector<SpeculativeStep> bad = {{2, 3}};
  EXPECT_THROW(AgreementTrace::from_steps(bad, 5, 7), std::invalid_argument);
  EXPECT_THROW(AgreementTrace::from_steps({}, 0, 7), std::invalid_argument);
}

TEST(PolicyReplay, TheRecordedPolicyGetsTheRecordedSteps) {
  // Recorded at fixed k = 4 and replayed at fixed k = 4 over its own 16 tokens: the same
  // steps, except that the last one may only draft what fits (3 tokens before the end).
  const std::vector<SpeculativeStep> steps = {{4, 2}, {4, 4}, {4, 1}, {4, 0}, {4, 3}};
  const int32_t n = 1 + 3 + 5 + 2 + 1 + 4;
  const auto t = AgreementTrace::from_steps(steps, n, 10);
  const CostModel costs = CostModel::from_ratios(0.25, {1.0, 1.1, 1.2, 1.3, 1.4});
  FixedPolicy fixed;
  const auto r = replay(fixed, t, costs, 4, n);
  EXPECT_EQ(r.tokens, n - 1);
  EXPECT_EQ(r.unknown, 0);
  EXPECT_EQ(r.steps_per_k, (std::vector<int64_t>{0, 0, 0, 1, 4}));
  // Each step's first draft pass reads what the draft has not seen: the prompt and the first
  // token (11), then 1 token after a rejection or 2 after a whole accepted draft (its last
  // token and the target's); then k - 1 one-token passes and the k + 1-token target pass.
  const double c = costs.c();
  const double expect = costs.catch_up(11) + 3 * c + costs.r(4) + costs.catch_up(1) + 3 * c + costs.r(4) +
                        costs.catch_up(2) + 3 * c + costs.r(4) + costs.catch_up(1) + 3 * c + costs.r(4) +
                        costs.catch_up(1) + 2 * c + costs.r(3);
  EXPECT_NEAR(r.cost, expect, 1e-9);
  EXPECT_GT(r.speedup(), 1.0);
}

TEST(PolicyReplay, ShorterDraftsGetTheAgreementTheyReach) {
  const std::vector<SpeculativeStep> steps = {{8, 5}, {8, 8}, {8, 0}};
  const int32_t n = 1 + 6 + 9 + 1;
  const auto t = AgreementTrace::from_steps(steps, n, 4);
  const CostModel costs = CostModel::from_ratios(0.2, {1.0, 1.05, 1.1, 1.15});
  FixedPolicy fixed;
  const auto r = replay(fixed, t, costs, 3, n);
  // From position 1: 3 of 3 (the recorded run agrees for 5); from 5: 1, then the rejection
  // at 6; from 7 and 11: 3 of 3 inside the run recorded whole (lower bounds of 8 and 4 that
  // suffice); from 15 one token fits, and the bound there (0 of a whole run) is all there is:
  // counted; the last token is a plain step (no room for a draft).
  EXPECT_EQ(r.tokens, n - 1);
  EXPECT_EQ(r.steps_per_k, (std::vector<int64_t>{1, 1, 0, 4}));
  EXPECT_EQ(r.unknown, 1);
  // Plain decoding costs one target pass a token; a replay that never drafts matches it.
  AdaptiveConfig off;
  off.alpha_prior = 0.0;
  off.min_trials = 0;
  off.measure_overhead = false;
  const CostModel dear = CostModel::from_ratios(5.0, {1.0, 3.0, 5.0, 7.0});  // the policy keeps a reference
  AdaptivePolicy never(dear, off);
  const auto p = replay(never, t, costs, 3, n);
  EXPECT_EQ(p.steps_per_k[0], n - 1);
  EXPECT_DOUBLE_EQ(p.cost, n - 1);
  EXPECT_DOUBLE_EQ(p.speedup(), 1.0);
}

TEST(PolicyReplay, GoodputTurnsOffWhereTheDraftNeverAgrees) {
  std::vector<SpeculativeStep> steps(199, {16, 0});
  const auto t = AgreementTrace::from_steps(steps, 200, 12);
  const CostModel costs = CostModel::from_ratios(0.3, {1.0, 1.05, 1.1, 1.15, 1.2});
  AdaptiveConfig cfg;
  cfg.start_budget = -1.0;  // start at once (no target confidence in a trace)
  cfg.measure_overhead = false;
  AdaptivePolicy p(costs, cfg);
  const auto r = replay(p, t, costs, 4, 200);
  EXPECT_GT(r.steps_per_k[0], 150) << "off for most of the output";
  EXPECT_LT(r.cost, 1.15 * r.tokens) << "what it tried cost little";
  EXPECT_GT(r.cost, r.tokens) << "and it did cost something";
}

}  // namespace
}  // namespace tandem
