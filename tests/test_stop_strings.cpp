#include <gtest/gtest.h>

#include "engine/text/stop_strings.hpp"

namespace tandem {
namespace {

std::string feed(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.push(p);
  return out;
}

TEST(StopMatcher, CutsBeforeAStopStringSplitAcrossPieces) {
  StopMatcher m({"\nUser:"});
  const std::string out = feed(m, {"Hello", " there", "\nUs", "er", ": more"});
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(out, "Hello there");
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("abcE"), "abc");
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");  // it was not the stop string after all
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("tail E"), "tail ");
  EXPECT_EQ(m.flush(), "E");
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"cd", "b"});
  EXPECT_EQ(m.push("abcd"), "a");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("x"), "x");
  StopMatcher e({""});  // empty stop strings are ignored, not matched everywhere
  EXPECT_EQ(e.push("abc"), "abc");
  EXPECT_FALSE(e.stopped());
}

}  // namespace
}  // namespace tandem
