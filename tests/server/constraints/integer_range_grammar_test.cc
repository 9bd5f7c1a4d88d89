// IntegerRangeGbnf against brute force: its expression only uses quoted digits, digit classes,
// counted repetition, sequences and alternation, so it reads as an ECMAScript regex once the
// quotes and spaces go; every integer in a window around the range (and strings with leading
// zeros) is matched iff it is in the range.
#include "server/constraints/integer_range_grammar.h"

#include <cstdint>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

std::regex AsRegex(const std::string& gbnf) {
  std::string pattern;
  for (size_t i = 0; i < gbnf.size(); ++i) {
    if (gbnf[i] == ' ') continue;
    if (gbnf[i] == '"') {
      const char c = gbnf[i + 1];
      EXPECT_EQ(gbnf[i + 2], '"') << gbnf;
      pattern += c == '-' ? std::string("\\-") : std::string(1, c);
      i += 2;
      continue;
    }
    pattern += gbnf[i];
  }
  return std::regex(pattern);
}

bool Matches(const std::regex& re, const std::string& text) { return std::regex_match(text, re); }

TEST(IntegerRangeGbnfTest, MatchesExactlyTheRangeAroundIt) {
  const std::pair<int64_t, int64_t> ranges[] = {
      {0, 0},    {-5, 5},     {3, 17},   {-1200, -7}, {0, 1000}, {99, 1001}, {-999, 0},
      {120, 1299}, {7, 7},    {-1, -1},  {10, 99},    {1, 9},    {-10, 10},  {58, 2345}};
  for (const auto& [lo, hi] : ranges) {
    const std::string gbnf = IntegerRangeGbnf(lo, hi);
    const std::regex re = AsRegex(gbnf);
    for (int64_t v = -2500; v <= 2500; ++v) {
      ASSERT_EQ(Matches(re, absl::StrCat(v)), lo <= v && v <= hi)
          << "[" << lo << ", " << hi << "] at " << v << ": " << gbnf;
    }
    for (const char* bad : {"00", "01", "-0", "-00", "007", "", "-"}) {
      EXPECT_FALSE(Matches(re, bad)) << bad << " in [" << lo << ", " << hi << "]: " << gbnf;
    }
  }
}

TEST(IntegerRangeGbnfTest, AMissingBoundAllowsSixteenDigitsOnThatSide) {
  const std::regex any = AsRegex(IntegerRangeGbnf(std::nullopt, std::nullopt));
  EXPECT_TRUE(Matches(any, "9999999999999999"));
  EXPECT_TRUE(Matches(any, "-9999999999999999"));
  EXPECT_FALSE(Matches(any, "10000000000000000"));
  EXPECT_TRUE(Matches(any, "0"));
  const std::regex from5 = AsRegex(IntegerRangeGbnf(5, std::nullopt));
  EXPECT_TRUE(Matches(from5, "5"));
  EXPECT_FALSE(Matches(from5, "4"));
  EXPECT_FALSE(Matches(from5, "-1"));
  EXPECT_TRUE(Matches(from5, "9999999999999999"));
  const std::regex to_minus3 = AsRegex(IntegerRangeGbnf(std::nullopt, -3));
  EXPECT_TRUE(Matches(to_minus3, "-3"));
  EXPECT_FALSE(Matches(to_minus3, "-2"));
  EXPECT_TRUE(Matches(to_minus3, "-9999999999999999"));
}

TEST(IntegerRangeGbnfTest, JavaScriptSafeIntegers) {
  // What zod's int() puts in a schema (the openai client's zodResponseFormat sends it).
  const std::regex safe = AsRegex(IntegerRangeGbnf(-9007199254740991, 9007199254740991));
  EXPECT_TRUE(Matches(safe, "9007199254740991"));
  EXPECT_FALSE(Matches(safe, "9007199254740992"));
  EXPECT_TRUE(Matches(safe, "-9007199254740991"));
  EXPECT_FALSE(Matches(safe, "-9007199254740992"));
  EXPECT_TRUE(Matches(safe, "42"));
}

}  // namespace
}  // namespace linserve
