#include "client/cli/flag_set.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace linserve::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct Flags {
  std::string target = "localhost:50051";
  bool tls = false;
  int32_t count = 3;
  int64_t big = 0;
  double rate = 1.5;
  std::optional<float> temperature;
  std::optional<uint64_t> seed;
  std::optional<int32_t> top_k;
  std::vector<std::string> stop;
  std::vector<int32_t> ids;
  absl::Duration timeout = absl::Seconds(60);
};

FlagSet MakeSet(Flags& f) {
  FlagSet set;
  set.Add("target", &f.target, "HOST:PORT", "Server address.");
  set.Add("tls", &f.tls, "Use TLS.");
  set.Add("count", &f.count, "N", "How many.");
  set.Add("big", &f.big, "N", "A large number.");
  set.Add("rate", &f.rate, "R", "Per second.");
  set.Add("temperature", &f.temperature, "T", "Sampling temperature.");
  set.Add("seed", &f.seed, "SEED", "Seed.");
  set.Add("top_k", &f.top_k, "K", "Top k.");
  set.Add("stop", &f.stop, "TEXT", "Stop string; repeatable.");
  set.Add("stop-token-id", &f.ids, "ID[,ID...]", "Stop token ids.");
  set.Add("timeout", &f.timeout, "DURATION", "Deadline.");
  return set;
}

TEST(FlagSetTest, ParsesEveryFormAndKeepsPositionalsInOrder) {
  Flags f;
  FlagSet set = MakeSet(f);
  const std::vector<std::string> args = {
      "a",          "--target=h:1", "--tls",  "b",        "--count", "7",
      "--big=-9000000000", "--rate", "0.25", "--temperature=0", "--seed=18446744073709551615",
      "--top-k=4",  "--stop=x",     "--stop", "y z",      "--stop_token_id=1,2",
      "--stop-token-id", "3",       "--timeout=1.5s", "--",     "--not-a-flag"};
  auto positional = set.Parse(args);
  ASSERT_TRUE(positional.ok()) << positional.status();
  EXPECT_THAT(*positional, ElementsAre("a", "b", "--not-a-flag"));
  EXPECT_EQ(f.target, "h:1");
  EXPECT_TRUE(f.tls);
  EXPECT_EQ(f.count, 7);
  EXPECT_EQ(f.big, -9000000000);
  EXPECT_DOUBLE_EQ(f.rate, 0.25);
  ASSERT_TRUE(f.temperature.has_value());
  EXPECT_EQ(*f.temperature, 0.0f);
  EXPECT_EQ(f.seed, 18446744073709551615ull);
  EXPECT_EQ(f.top_k, 4);
  EXPECT_THAT(f.stop, ElementsAre("x", "y z"));
  EXPECT_THAT(f.ids, ElementsAre(1, 2, 3));
  EXPECT_EQ(f.timeout, absl::Milliseconds(1500));
  EXPECT_TRUE(set.WasSet("top_k"));
  EXPECT_FALSE(set.WasSet("nothing"));
}

TEST(FlagSetTest, UnsetOptionalsStayEmptyAndDefaultsStay) {
  Flags f;
  FlagSet set = MakeSet(f);
  ASSERT_TRUE(set.Parse({}).ok());
  EXPECT_FALSE(f.temperature.has_value());
  EXPECT_FALSE(f.seed.has_value());
  EXPECT_EQ(f.target, "localhost:50051");
  EXPECT_FALSE(set.WasSet("target"));
}

TEST(FlagSetTest, BooleanForms) {
  Flags f;
  FlagSet set = MakeSet(f);
  ASSERT_TRUE(set.Parse(std::vector<std::string>{"--tls=true"}).ok());
  EXPECT_TRUE(f.tls);
  ASSERT_TRUE(set.Parse(std::vector<std::string>{"--notls"}).ok());
  EXPECT_FALSE(f.tls);
  ASSERT_TRUE(set.Parse(std::vector<std::string>{"--tls=yes"}).ok());
  EXPECT_TRUE(f.tls);
  auto bad = set.Parse(std::vector<std::string>{"--tls=maybe"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("--tls=maybe: expected true or false"));
}

TEST(FlagSetTest, StopAtPositionalLeavesTheRestUnparsed) {
  Flags f;
  FlagSet set = MakeSet(f);
  auto rest = set.Parse(std::vector<std::string>{"--target", "x:2", "generate", "--count=9", "hi"},
                        /*stop_at_positional=*/true);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_THAT(*rest, ElementsAre("generate", "--count=9", "hi"));
  EXPECT_EQ(f.target, "x:2");
  EXPECT_EQ(f.count, 3);
}

TEST(FlagSetTest, ErrorsNameTheFlagAndWhatItExpects) {
  Flags f;
  FlagSet set = MakeSet(f);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  } cases[] = {
      {{"--count=x"}, "--count=x: expected a 32-bit integer"},
      {{"--count=99999999999"}, "--count=99999999999: expected a 32-bit integer"},
      {{"--rate=fast"}, "--rate=fast: expected a number"},
      {{"--seed=-1"}, "--seed=-1: expected an unsigned 64-bit integer"},
      {{"--stop-token-id=1,a"}, "--stop-token-id: \"a\" is not a 32-bit integer"},
      {{"--bogus"}, "unknown flag --bogus"},
      {{"-x"}, "unknown flag -x"},
      {{"--target"}, "--target needs a value (--target=HOST:PORT)"},
      {{"--nocount"}, "unknown flag --nocount"},
      {{"--timeout=soon"}, "--timeout=soon: expected a duration such as 500ms, 30s, 2m or inf"},
  };
  for (const Case& c : cases) {
    auto result = set.Parse(c.args);
    ASSERT_FALSE(result.ok()) << c.args[0];
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(result.status().message()), HasSubstr(c.message)) << c.args[0];
  }
}

TEST(FlagSetTest, DashAloneIsPositionalAndShortHelpIsHelp) {
  std::string file;
  bool help = false;
  FlagSet set;
  set.Add("file", &file, "FILE", "A file.");
  set.Add("help", &help, "Show help.");
  auto positional = set.Parse(std::vector<std::string>{"-", "-h"});
  ASSERT_TRUE(positional.ok());
  EXPECT_THAT(*positional, ElementsAre("-"));
  EXPECT_TRUE(help);
}

TEST(FlagSetTest, UsageListsEveryFlagWithDefaultsAndWrapsHelp) {
  Flags f;
  FlagSet set = MakeSet(f);
  const std::string usage = set.Usage();
  EXPECT_THAT(usage, HasSubstr("  --target=HOST:PORT  (default: localhost:50051)\n      Server address.\n"));
  EXPECT_THAT(usage, HasSubstr("  --tls\n      Use TLS.\n"));
  EXPECT_THAT(usage, HasSubstr("  --top-k=K\n"));
  EXPECT_THAT(usage, HasSubstr("  --rate=R  (default: 1.5)\n"));
  EXPECT_THAT(usage, HasSubstr("  --timeout=DURATION  (default: 1m)\n"));

  std::string long_help;
  for (int i = 0; i < 40; ++i) long_help += "word ";
  std::string value;
  FlagSet wrapped;
  wrapped.Add("x", &value, "V", long_help);
  for (absl::string_view line : absl::StrSplit(wrapped.Usage(), '\n')) {
    EXPECT_LE(line.size(), 92u) << line;
  }
}

TEST(WrapTextTest, WrapsParagraphsAndKeepsPreformattedLines) {
  EXPECT_EQ(WrapText("aa bb cc dd", 2, 8), "  aa bb\n  cc dd\n");
  EXPECT_EQ(WrapText("one\n\n  keep   this\ntwo", 0, 80), "one\n\n  keep   this\ntwo\n");
  EXPECT_EQ(WrapText("averyveryverylongword x", 0, 5), "averyveryverylongword\nx\n");
}

TEST(ParseIntListTest, AcceptsCommasAndSpaces) {
  auto ids = ParseIntList("1, 2,3  4", "ids");
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(1, 2, 3, 4));
  EXPECT_FALSE(ParseIntList("1,,x", "ids").ok());
}

}  // namespace
}  // namespace linserve::cli
