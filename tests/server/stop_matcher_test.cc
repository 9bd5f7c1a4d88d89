#include "server/engine/stop_matcher.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace linserve {
namespace {

// Feeds `pieces` one by one and returns everything released (Flush included unless matched).
std::string Stream(StopMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += matcher.Push(piece);
  if (!matcher.matched()) out += matcher.Flush();
  return out;
}

TEST(StopMatcherTest, WithoutStopStringsEverythingPassesAtOnce) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.Push("hello"), "hello");
  EXPECT_EQ(matcher.Push(" world"), " world");
  EXPECT_FALSE(matcher.matched());
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, StopsBeforeAStopStringSplitAcrossPieces) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.Push("abc E"), "abc ");  // "E" might begin "END"
  EXPECT_EQ(matcher.Push("N"), "");
  EXPECT_EQ(matcher.Push("Dxyz"), "");
  EXPECT_TRUE(matcher.matched());
  EXPECT_EQ(matcher.Push("more"), "");
  EXPECT_EQ(matcher.Flush(), "");
}

TEST(StopMatcherTest, ReleasesHeldTextThatTurnsOutNotToBeAStop) {
  StopMatcher matcher({"END"});
  EXPECT_EQ(matcher.Push("xEN"), "x");
  EXPECT_EQ(matcher.Push("x"), "ENx");
  EXPECT_FALSE(matcher.matched());
}

TEST(StopMatcherTest, EarliestOccurrenceOfAnyStopWins) {
  StopMatcher matcher({"world", "lo w"});
  EXPECT_EQ(Stream(matcher, {"hel", "lo world"}), "hel");
  EXPECT_TRUE(matcher.matched());
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  StopMatcher matcher({"aab"});
  EXPECT_EQ(Stream(matcher, {"a", "a", "a", "b", "c"}), "a");
  EXPECT_TRUE(matcher.matched());
}

TEST(StopMatcherTest, HoldsBackOnlyWholeUtf8Characters) {
  StopMatcher matcher({"é!"});
  EXPECT_EQ(matcher.Push("café"), "caf");  // "é" could begin "é!"
  EXPECT_EQ(matcher.Push("?"), "é?");
  EXPECT_EQ(Stream(matcher, {"é", "!"}), "");
  EXPECT_TRUE(matcher.matched());
}

TEST(StopMatcherTest, FlushReleasesAPartialMatchAtTheEnd) {
  StopMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.Push("go ST"), "go ");
  EXPECT_EQ(matcher.Flush(), "ST");
  EXPECT_FALSE(matcher.matched());
}

}  // namespace
}  // namespace linserve
