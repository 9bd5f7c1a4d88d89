#include "client/cli/generation.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "client/cli/command.h"
#include "client/cli/flag_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<v1::GenerateRequest> Build(const std::vector<std::string>& args) {
  GenerationFlags generation;
  FlagSet flags;
  generation.AddTo(flags);
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  if (!rest.ok()) return rest.status();
  v1::GenerateRequest request;
  if (absl::Status s = generation.Apply(request); !s.ok()) return s;
  return request;
}

TEST(GenerationFlagsTest, EveryFlagSetsItsField) {
  absl::StatusOr<v1::GenerateRequest> r =
      Build({"--max-new-tokens=17", "--temperature=0.5", "--top-k=40", "--top-p=0.9",
             "--min-p=0.05", "--repetition-penalty=1.3", "--presence-penalty=0.25",
             "--frequency-penalty=-0.5", "--seed=18446744073709551615", "--stop=\\n\\n",
             "--stop=END", "--stop-token-id=3,4", "--stop-token-id=9", "--ignore-eos",
             "--top-logprobs=5", "--logit-bias=7=-100", "--logit-bias=12=2.5"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->max_new_tokens(), 17);
  const v1::SamplingParams& s = r->sampling();
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_FLOAT_EQ(s.min_p(), 0.05f);
  EXPECT_FLOAT_EQ(s.repetition_penalty(), 1.3f);
  EXPECT_FLOAT_EQ(s.presence_penalty(), 0.25f);
  EXPECT_FLOAT_EQ(s.frequency_penalty(), -0.5f);
  EXPECT_EQ(s.seed(), 18446744073709551615ull);
  EXPECT_THAT(r->stop(), ElementsAre("\n\n", "END"));
  EXPECT_THAT(r->stop_token_ids(), ElementsAre(3, 4, 9));
  EXPECT_TRUE(r->ignore_eos());
  EXPECT_EQ(r->top_logprobs(), 5);
  EXPECT_EQ(s.logit_bias().size(), 2u);
  EXPECT_FLOAT_EQ(s.logit_bias().at(7), -100.0f);
  EXPECT_FLOAT_EQ(s.logit_bias().at(12), 2.5f);
}

TEST(GenerationFlagsTest, UnsetFlagsLeaveTheServerDefaults) {
  absl::StatusOr<v1::GenerateRequest> r = Build({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->has_max_new_tokens());
  const v1::SamplingParams& s = r->sampling();
  EXPECT_FALSE(s.has_temperature());
  EXPECT_FALSE(s.has_top_k());
  EXPECT_FALSE(s.has_top_p());
  EXPECT_FALSE(s.has_min_p());
  EXPECT_FALSE(s.has_repetition_penalty());
  EXPECT_FALSE(s.has_presence_penalty());
  EXPECT_FALSE(s.has_frequency_penalty());
  EXPECT_FALSE(s.has_seed());
  EXPECT_TRUE(r->stop().empty());
  EXPECT_FALSE(r->ignore_eos());
  EXPECT_EQ(r->top_logprobs(), 0);
}

TEST(GenerationFlagsTest, BadEscapeInStopIsAUsageError) {
  absl::StatusOr<v1::GenerateRequest> r = Build({"--stop=\\q"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(IsUsageError(r.status()));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("--stop=\\q"));
}

// The constraint `args` ask for, reading files relative to nothing (absolute paths).
absl::StatusOr<std::optional<v1::Constraint>> ConstraintOf(const std::vector<std::string>& args) {
  GenerationFlags generation;
  FlagSet flags;
  generation.AddTo(flags);
  absl::StatusOr<std::vector<std::string>> rest = flags.Parse(args);
  if (!rest.ok()) return rest.status();
  std::istringstream in;
  std::ostringstream out;
  std::ostringstream err;
  Io io{in, out, err};
  return generation.ReadConstraint(io);
}

TEST(GenerationFlagsTest, EachConstraintFlagSetsItsKind) {
  const std::string dir = ::testing::TempDir();
  const std::string schema = dir + "/generation_flags_test_schema.json";
  const std::string grammar = dir + "/generation_flags_test_grammar.gbnf";
  std::ofstream(schema) << R"({"type": "object"})";
  std::ofstream(grammar) << "root ::= \"yes\" | \"no\"\n";

  absl::StatusOr<std::optional<v1::Constraint>> c = ConstraintOf({"--json-schema=" + schema});
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->json_schema(), R"({"type": "object"})");
  c = ConstraintOf({"--json-object"});
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_TRUE((*c)->has_json_object());
  c = ConstraintOf({"--regex=[0-9]+"});
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->regex(), "[0-9]+");
  c = ConstraintOf({"--grammar=" + grammar});
  ASSERT_TRUE(c.ok() && c->has_value()) << c.status();
  EXPECT_EQ((*c)->grammar(), "root ::= \"yes\" | \"no\"\n");
  c = ConstraintOf({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_value());
}

TEST(GenerationFlagsTest, AtMostOneConstraintAndItsFileMustBeReadable) {
  absl::StatusOr<std::optional<v1::Constraint>> c =
      ConstraintOf({"--json-object", "--regex=a"});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(IsUsageError(c.status()));
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("at most one of --json-schema"));
  const std::string missing = ::testing::TempDir() + "/no-such-schema.json";
  c = ConstraintOf({"--json-schema=" + missing});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(missing));
}

TEST(GenerationFlagsTest, FormatIsTextOrJsonl) {
  GenerationFlags flags;
  EXPECT_EQ(flags.Jsonl().value(), false);
  flags.format = "jsonl";
  EXPECT_EQ(flags.Jsonl().value(), true);
  flags.format = "xml";
  EXPECT_TRUE(IsUsageError(flags.Jsonl().status()));
}

TEST(FinishReasonNameTest, DropsThePrefix) {
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_LENGTH), "LENGTH");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_EOS), "EOS");
  EXPECT_EQ(FinishReasonName(v1::FINISH_REASON_CONSTRAINT_COMPLETE), "CONSTRAINT_COMPLETE");
}

}  // namespace
}  // namespace linserve::cli
