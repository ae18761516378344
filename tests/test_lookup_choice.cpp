// LookupChoice (policies/lookup_choice.hpp): which source drafts a step when prompt lookup
// has a draft — tried while it has no record, then the faster source per millisecond, with a
// retry after kRetryAfter chances passed over.
#include <gtest/gtest.h>

#include "policies/lookup_choice.hpp"

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

}  // namespace
}  // namespace tandem
