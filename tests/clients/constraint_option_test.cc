// linserve-loadtest's --constraint values, without a server (loadtest_test runs the tool).
#include "client/loadtest/constraint_option.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve::loadtest {
namespace {

using ::testing::HasSubstr;

TEST(ConstraintOptionTest, EachKind) {
  const std::string schema = ::testing::TempDir() + "/constraint_option_test_schema.json";
  const std::string grammar = ::testing::TempDir() + "/constraint_option_test_grammar.gbnf";
  std::ofstream(schema) << R"({"type": "integer"})";
  std::ofstream(grammar) << "root ::= [a-z]+\n";

  absl::StatusOr<v1::Constraint> c = ParseConstraintOption("json_object");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->has_json_object());
  c = ParseConstraintOption("json_schema:" + schema);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->json_schema(), R"({"type": "integer"})");
  // A pattern may hold colons.
  c = ParseConstraintOption("regex:a:[0-9]{2}");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->regex(), "a:[0-9]{2}");
  c = ParseConstraintOption("grammar:" + grammar);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->grammar(), "root ::= [a-z]+\n");
}

TEST(ConstraintOptionTest, OtherFormsAndMissingFilesNameTheFlag) {
  for (const std::string bad : {"json", "regex:", "json_schema:", "grammar", "JSON_OBJECT"}) {
    absl::StatusOr<v1::Constraint> c = ParseConstraintOption(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()),
                HasSubstr("--constraint=" + bad + ": expected json_object, json_schema:FILE"));
  }
  const std::string missing = ::testing::TempDir() + "/no-such.gbnf";
  absl::StatusOr<v1::Constraint> c = ParseConstraintOption("grammar:" + missing);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("cannot read \"" + missing + "\""));
}

}  // namespace
}  // namespace linserve::loadtest
