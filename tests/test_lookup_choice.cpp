// LookupChoice (policies/lookup_choice.hpp): which source drafts a step when prompt lookup
// has a draft — tried while it has no record, then the faster source per millisecond, with a
// retry after kRetryAfter chances passed over. And the same record where both ways are tried
// and a losing retry waits longer (RateChoice's try_both and back_off: ShapeChoice, trees
// against chains).
#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <vector>

#include "policies/lookup_choice.hpp"
#include "policies/rate_choice.hpp"
#include "policies/shape_choice.hpp"

namespace tandem {
namespace {

TEST(LookupChoice, TriesLookupUntilBothSourcesHaveARecord) {
  LookupChoice c;
  EXPECT_TRUE(c.prefer_lookup());  // nothing known
  c.observe_draft(3, 40.0);
  EXPECT_TRUE(c.prefer_lookup());  // lookup still unknown
  c.observe_lookup(0, 30.0);       // 1 token in 30 ms against the draft's 4 in 40
  EXPECT_FALSE(c.prefer_lookup());
}

TEST(LookupChoice, PrefersTheSourceThatCommitsMoreTokensPerMillisecond) {
  LookupChoice c;
  c.observe_draft(3, 40.0);   // 0.1 tokens/ms
  c.observe_lookup(4, 30.0);  // 0.167 tokens/ms
  EXPECT_TRUE(c.prefer_lookup());
  EXPECT_TRUE(c.prefer_lookup());
  // Lookup stops paying: rejected drafts, steps at the target's cost.
  for (int i = 0; i < 6; ++i) c.observe_lookup(0, 30.0);
  EXPECT_FALSE(c.prefer_lookup());
  // A run of draft steps that commit little makes lookup the better one again.
  for (int i = 0; i < 12; ++i) c.observe_draft(0, 45.0);
  EXPECT_TRUE(c.prefer_lookup());
}

TEST(LookupChoice, RetriesLookupAfterPassingItOver) {
  LookupChoice c;
  c.observe_draft(4, 40.0);
  c.observe_lookup(0, 35.0);
  int passed = 0;
  while (!c.prefer_lookup()) ++passed;
  EXPECT_EQ(passed, LookupChoice::kRetryAfter - 1);
  // After the retry the count starts again.
  EXPECT_FALSE(c.prefer_lookup());
  c.reset();
  EXPECT_TRUE(c.prefer_lookup());
}

TEST(LookupChoice, RecentStepsWeighMost) {
  LookupChoice c;
  // A long good record of lookup, then a bad phase: the decay lets the bad phase win soon.
  for (int i = 0; i < 30; ++i) c.observe_lookup(4, 30.0);
  c.observe_draft(2, 40.0);  // 0.075 tokens/ms
  EXPECT_TRUE(c.prefer_lookup());
  int bad = 0;
  while (c.prefer_lookup() && bad < 20) {
    c.observe_lookup(0, 30.0);
    ++bad;
  }
  EXPECT_LT(bad, 12) << "an old record outweighed a long bad phase";
}

// Passed-over chances before the first way is taken again.
int wait_for_first(RateChoice& c) {
  int passed = 0;
  while (!c.prefer_first() && passed < 1000) ++passed;
  return passed;
}

TEST(RateChoice, TryingBothTakesTheSecondWayOnceBeforeComparing) {
  RateChoice c(true);
  EXPECT_TRUE(c.prefer_first());  // nothing known
  c.observe_first(1, 30.0);
  EXPECT_FALSE(c.prefer_first());  // the second way has no record yet: it is tried
  c.observe_second(3, 30.0);       // 4 tokens in 30 ms against 2
  EXPECT_FALSE(c.prefer_first());
  RateChoice lookup;               // without try_both the first way stays while the second is unknown
  lookup.observe_first(1, 30.0);
  EXPECT_TRUE(lookup.prefer_first());
}

TEST(RateChoice, ALosingRetryWaitsTwiceAsLongAndAWinStartsOver) {
  RateChoice c(true, true);
  c.observe_first(0, 30.0);
  c.observe_second(3, 30.0);
  int wait = RateChoice::kRetryAfter;
  for (int round = 0; round < 5; ++round) {
    EXPECT_EQ(wait_for_first(c), wait - 1) << "round " << round;
    c.observe_first(0, 30.0);  // the retry loses again
    wait = std::min(2 * wait, RateChoice::kMaxRetryAfter);
  }
  EXPECT_EQ(wait_for_first(c), RateChoice::kMaxRetryAfter - 1);
  for (int i = 0; i < 20; ++i) c.observe_first(8, 30.0);  // the first way wins now
  EXPECT_TRUE(c.prefer_first());
  for (int i = 0; i < 40; ++i) c.observe_second(8, 10.0);  // and loses again: the wait is back to the start
  EXPECT_EQ(wait_for_first(c), RateChoice::kRetryAfter - 1);
  RateChoice plain(true);  // without back_off every retry waits kRetryAfter
  plain.observe_first(0, 30.0);
  plain.observe_second(3, 30.0);
  for (int round = 0; round < 3; ++round) {
    EXPECT_EQ(wait_for_first(plain), RateChoice::kRetryAfter - 1);
    plain.observe_first(0, 30.0);
  }
}

// A restored state carries on as the choice it came from: the same records, the same retry
// wait (backed off) and the same count of chances passed; damaged values are clamped.
TEST(RateChoice, ARestoredStateCarriesOnWhereItStopped) {
  RateChoice c(true, true);
  c.observe_first(0, 30.0);
  c.observe_second(3, 30.0);
  for (int round = 0; round < 3; ++round) {  // three losing retries: the wait is 64
    wait_for_first(c);
    c.observe_first(0, 30.0);
  }
  for (int i = 0; i < 10; ++i) ASSERT_FALSE(c.prefer_first());
  const RateChoice::State s = c.state();
  EXPECT_EQ(s.retry_after, RateChoice::kMaxRetryAfter);
  EXPECT_EQ(s.passed, 10);
  RateChoice d(true, true);
  d.restore(s);
  EXPECT_TRUE(d.state() == s);
  EXPECT_EQ(wait_for_first(d), RateChoice::kMaxRetryAfter - 10 - 1) << "the restored choice retried early";
  EXPECT_EQ(wait_for_first(c), RateChoice::kMaxRetryAfter - 10 - 1);

  RateChoice::State bad;
  bad.first_tokens = std::nan("");
  bad.first_ms = 30.0;
  bad.first_steps = 1.0;
  bad.second_tokens = 4.0;
  bad.second_ms = -1.0;  // no timed step: no record
  bad.second_steps = 1.0;
  bad.passed = -5;
  bad.retry_after = 1 << 20;
  RateChoice e(true, true);
  e.restore(bad);
  const RateChoice::State u = e.state();
  EXPECT_EQ(u.first_tokens, 0.0);
  EXPECT_EQ(u.first_ms, 30.0);
  EXPECT_EQ(u.second_ms, 0.0);
  EXPECT_EQ(u.second_tokens, 0.0);
  EXPECT_EQ(u.passed, 0);
  EXPECT_EQ(u.retry_after, RateChoice::kMaxRetryAfter);
  EXPECT_FALSE(e.prefer_first()) << "the chain, with no record, is tried first (try_both)";
}

// refresh: while the first way wins, the second is taken once every kRefreshAfter chances
// (its step time is measured only by its own steps); without it, never.
TEST(RateChoice, AWinningFirstWayStillRetimesTheSecondNowAndThen) {
  for (bool refresh : {true, false}) {
    RateChoice c(true, true, refresh);
    c.observe_first(6, 30.0);
    c.observe_second(1, 30.0);
    std::vector<int> second_at;
    for (int i = 0; i < 3 * RateChoice::kRefreshAfter; ++i)
      if (!c.prefer_first()) {
        second_at.push_back(i);
        c.observe_second(1, 30.0);  // still the slower way
      }
    if (refresh) {
      EXPECT_EQ(second_at, (std::vector<int>{RateChoice::kRefreshAfter - 1, 2 * RateChoice::kRefreshAfter - 1,
                                            3 * RateChoice::kRefreshAfter - 1}));
    } else {
      EXPECT_TRUE(second_at.empty());
    }
  }
}

TEST(ShapeChoice, TreesAreTriedThenTheFasterWayKept) {
  ShapeChoice s;
  EXPECT_TRUE(s.prefer_tree());
  s.observe(true, 1, 50.0);
  EXPECT_FALSE(s.prefer_tree());  // the chain is tried
  s.observe(false, 3, 40.0);
  EXPECT_FALSE(s.prefer_tree());  // 0.1 tokens/ms against 0.04
  s.observe(true, 6, 20.0);
  s.observe(true, 6, 20.0);
  EXPECT_TRUE(s.prefer_tree());
}

// A paired observation adds what the second way would have committed at its mean step time
// so far, and nothing while the second way has no record.
TEST(RateChoice, ASecondWayInsteadCountsAtItsMeanStepTime) {
  RateChoice c(true);
  c.observe_second_instead(9);  // no record: ignored
  c.observe_first(3, 50.0);     // 4 tokens in 50 ms
  EXPECT_FALSE(c.prefer_first()) << "the second way was given a record it never earned";
  c.observe_second(3, 40.0);  // 4 in 40
  c.observe_first(3, 50.0);
  EXPECT_FALSE(c.prefer_first());
  for (int i = 0; i < 3; ++i) c.observe_second_instead(0);  // 1 token a step, still 40 ms a step
  EXPECT_TRUE(c.prefer_first());
}

// A greedy tree's lucky steps, where the chain in its place would have committed as much, do
// not keep trees chosen on the strength of an unlucky chain step: the paired observations
// bring the chain's record up to what it would have done, and the slower trees lose. Trees
// that commit more than the chain would have keep winning.
TEST(ShapeChoice, TreeStepsAreComparedWithTheChainInTheirPlace) {
  ShapeChoice s;
  ASSERT_TRUE(s.prefer_tree());
  s.observe(true, 4, 65.0, 4);
  ASSERT_FALSE(s.prefer_tree());  // the chain is tried
  s.observe(false, 0, 50.0);      // and is unlucky once
  ASSERT_TRUE(s.prefer_tree());
  int trees = 0;
  for (int i = 0; i < 8 && s.prefer_tree(); ++i, ++trees) s.observe(true, 4, 65.0, 4);
  EXPECT_LE(trees, 3) << "trees that commit only what the chain would, 30% slower, kept being chosen";

  ShapeChoice w;
  ASSERT_TRUE(w.prefer_tree());
  w.observe(true, 4, 65.0, 1);
  ASSERT_FALSE(w.prefer_tree());
  w.observe(false, 1, 50.0);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(w.prefer_tree()) << "step " << i << ": trees that commit more than the chain would lost";
    w.observe(true, 4, 65.0, 1);
  }
}

}  // namespace
}  // namespace tandem
