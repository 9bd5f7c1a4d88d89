#include "server/constraints/regex_grammar.h"

#include <chrono>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/constraints/byte_documents.h"
#include "tests/server/constraints/regex_cases.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

std::string Gbnf(std::string_view pattern, const ConstraintLimits& limits = {}) {
  absl::StatusOr<std::string> gbnf = RegexToGbnf(pattern, limits);
  EXPECT_TRUE(gbnf.ok()) << pattern << ": " << gbnf.status();
  return gbnf.ok() ? *gbnf : "";
}

absl::Status Refusal(std::string_view pattern, const ConstraintLimits& limits = {}) {
  absl::StatusOr<std::string> gbnf = RegexToGbnf(pattern, limits);
  EXPECT_FALSE(gbnf.ok()) << pattern << " compiled to:\n" << *gbnf;
  return gbnf.status();
}

TEST(RegexGrammarTest, WritesLiteralsClassesAndQuantifiers) {
  EXPECT_EQ(Gbnf("ab"), "root ::= \"a\" \"b\"\n");
  EXPECT_EQ(Gbnf("[a-z]+"), "root ::= [a-z]+\n");
  EXPECT_EQ(Gbnf("\\d{3}-\\d{2,4}x{2,}y?"),
            "root ::= [0-9]{3} \"-\" [0-9]{2,4} \"x\"{2,} \"y\"?\n");
  EXPECT_EQ(Gbnf("(ab)*c"), "root ::= (\"a\" \"b\")* \"c\"\n");
  EXPECT_EQ(Gbnf("[^a-y\\d]"), "root ::= [\\x00-/:-`z-\\uD7FF\\uE000-\\U0010FFFF]\n");
  EXPECT_EQ(Gbnf("\\w"), "root ::= [0-9A-Z_a-z]\n");
  EXPECT_EQ(Gbnf("\\s"), "root ::= [\\x09-\\x0D ]\n");
  EXPECT_EQ(Gbnf("."), "root ::= [\\x00-\\x09\\x0B-\\uD7FF\\uE000-\\U0010FFFF]\n");
  EXPECT_EQ(Gbnf("\"\\\\\\x41\\u00e9é\\n"), "root ::= \"\\\"\" \"\\\\\" \"A\" \"\\u00E9\" "
                                            "\"\\u00E9\" \"\\x0A\"\n");
  EXPECT_EQ(Gbnf("[\\]\\-^]"), "root ::= [\\x2D\\x5D\\x5E]\n");
}

TEST(RegexGrammarTest, AlternationBecomesARule) {
  EXPECT_EQ(Gbnf("cat|dog"), "root ::= root-1\nroot-1 ::= \"c\" \"a\" \"t\" | \"d\" \"o\" \"g\"\n");
  EXPECT_EQ(Gbnf("x(a|b(c|d))"),
            "root ::= \"x\" root-2\nroot-1 ::= \"c\" | \"d\"\nroot-2 ::= \"a\" | \"b\" root-1\n");
  // An empty branch makes the rest optional.
  EXPECT_EQ(Gbnf("x(a|)"), "root ::= \"x\" \"a\"?\n");
  EXPECT_EQ(Gbnf("x(|a|b)"), "root ::= \"x\" root-1?\nroot-1 ::= \"a\" | \"b\"\n");
}

TEST(RegexGrammarTest, SameLanguageForms) {
  // Anchors at the ends, lazy quantifiers and named or non-capturing groups change nothing.
  EXPECT_EQ(Gbnf("^a+b*?c??$"), Gbnf("a+b*c?"));
  EXPECT_EQ(Gbnf("(?:a)(?P<n>b)(?<m>c)"), Gbnf("abc"));
  EXPECT_EQ(Gbnf("a{2,3}?"), Gbnf("a{2,3}"));
  // A '{' that starts no quantifier is a literal, an escaped '$' at the end too.
  EXPECT_EQ(Gbnf("a{"), "root ::= \"a\" \"{\"\n");
  EXPECT_EQ(Gbnf("a{,2}"), "root ::= \"a\" \"{\" \",\" \"2\" \"}\"\n");
  EXPECT_EQ(Gbnf("a\\$"), "root ::= \"a\" \"$\"\n");
  // [\b] is a backspace.
  EXPECT_EQ(Gbnf("[\\b]"), "root ::= \"\\x08\"\n");
}

TEST(RegexGrammarTest, RefusesUnsupportedConstructsAtTheirOffset) {
  const struct {
    const char* pattern;
    const char* message;
  } cases[] = {
      {"a(?=b)", "regex at offset 1: lookaround is not supported"},
      {"a(?!b)", "regex at offset 1: lookaround is not supported"},
      {"a(?<=b)", "regex at offset 1: lookaround is not supported"},
      {"a(?<!b)", "regex at offset 1: lookaround is not supported"},
      {"(a)\\1", "regex at offset 3: backreferences are not supported"},
      {"(?<n>a)\\k<n>", "regex at offset 7: backreferences are not supported"},
      {"(?P<n>a)(?P=n)", "regex at offset 8: backreferences are not supported"},
      {"a\\b", "regex at offset 1: anchors other than ^ and $ (here \\b) are not supported"},
      {"\\Aa", "regex at offset 0: anchors other than ^ and $ (here \\A) are not supported"},
      {"a^b", "regex at offset 1: '^' is supported only at the start of the pattern"},
      {"a$b", "regex at offset 1: '$' is supported only at the end of the pattern"},
      {"(a$)", "regex at offset 2: '$' is supported only at the end of the pattern"},
      {"a*+", "regex at offset 2: possessive quantifiers are not supported"},
      {"a{2}+", "regex at offset 4: possessive quantifiers are not supported"},
      {"(?i)a", "regex at offset 0: flags and other (? groups are not supported"},
      {"*a", "regex at offset 0: nothing to repeat"},
      {"a|?", "regex at offset 2: nothing to repeat"},
      {"a**", "regex at offset 2: multiple repeat"},
      {"(a", "regex at offset 0: missing ')'"},
      {"a)", "regex at offset 1: unbalanced ')'"},
      {"[ab", "regex at offset 0: missing ']'"},
      {"[]a]", "regex at offset 1: ']' first in a class is ambiguous"},
      {"x[z-a]", "regex at offset 2: range out of order"},
      {"[\\d-z]", "regex at offset 1: a range's ends must be characters"},
      {"a{3,2}", "regex at offset 1: repetition {m,n} with m > n"},
      {"a{2000000000}", "regex at offset 1: repetition count over 1000000000"},
      {"\\q", "regex at offset 0: unsupported escape \\q"},
      {"\\p{L}", "regex at offset 0: unsupported escape \\p"},
      {"ab\\x4", "regex at offset 2: escape needs 2 hex digits"},
      {"\\ud800", "regex at offset 0: a surrogate is no character"},
      {"\\01", "regex at offset 0: octal escapes are not supported"},
      {"a\\", "regex at offset 1: '\\' at the end of the pattern"},
      {"a\xff", "regex at offset 1: invalid UTF-8"},
      {"a\xc3", "regex at offset 1: invalid UTF-8"},
      {"(?P<>a)", "regex at offset 4: bad group name"},
  };
  for (const auto& c : cases) {
    const absl::Status status = Refusal(c.pattern);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.pattern;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.pattern;
  }
}

TEST(RegexGrammarTest, RefusesPatternsOnlyEmptyMatches) {
  for (const char* pattern : {"", "^$", "()", "a{0}", "(|)"}) {
    EXPECT_THAT(Refusal(pattern).message(), HasSubstr("matches only the empty string"))
        << pattern;
  }
}

TEST(RegexGrammarTest, RefusesPatternsBeyondTheLimits) {
  ConstraintLimits limits;
  limits.max_text_bytes = 8;
  EXPECT_THAT(Refusal("abcdefghi", limits).message(),
              HasSubstr("regex of 9 bytes exceeds max_text_bytes (8)"));
  EXPECT_TRUE(RegexToGbnf("abcdefgh", limits).ok());

  limits = ConstraintLimits();
  limits.max_nesting_depth = 3;
  EXPECT_TRUE(RegexToGbnf("(((a)))", limits).ok());
  EXPECT_THAT(Refusal("((((a))))", limits).message(),
              HasSubstr("regex at offset 3: groups nest deeper than max_nesting_depth (3)"));
  // Deep nesting under the default limit is refused without exhausting the stack.
  EXPECT_THAT(Refusal(std::string(100000, '(')).message(),
              HasSubstr("regex of 100000 bytes exceeds max_text_bytes"));
  EXPECT_THAT(Refusal(std::string(60000, '(')).message(),
              HasSubstr("regex at offset 64: groups nest deeper than max_nesting_depth (64)"));

  limits = ConstraintLimits();
  limits.max_grammar_elements = 100;
  EXPECT_TRUE(RegexToGbnf("a{90}", limits).ok());
  EXPECT_THAT(Refusal("a{200}", limits).message(),
              HasSubstr("the grammar would exceed max_grammar_elements (100)"));
  // A class beyond ASCII counts its UTF-8 byte ranges.
  EXPECT_THAT(Refusal("[^a]{10}", limits).message(), HasSubstr("max_grammar_elements (100)"));

  // Nested repetitions count as written out, and are refused before anything expands.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(Refusal("(a{1000}){1000}").message(),
              HasSubstr("the grammar would exceed max_grammar_elements (262144)"));
  EXPECT_THAT(Refusal("((((a{1000000000}){1000000000}){1000000000}){1000000000})*").message(),
              HasSubstr("max_grammar_elements"));
  // Long classes and alternations stay linear.
  std::string many_class = "[";
  for (int i = 0; i < 20000; ++i) many_class += i % 2 ? "\\d" : "a";
  many_class += "]";
  EXPECT_EQ(Gbnf(many_class), "root ::= [0-9a]\n");
  std::string many_branches = "a";
  for (int i = 0; i < 20000; ++i) many_branches += "|b";
  EXPECT_TRUE(RegexToGbnf(many_branches, ConstraintLimits()).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(RegexGrammarTest, JsonStringContentKeepsOnlyUnescapedCharacters) {
  absl::StatusOr<RegexRules> rules =
      RegexToGbnfRules("[^x]+\\.(a|b)", ConstraintLimits(), "p", /*json_string_content=*/true,
                       1000);
  ASSERT_TRUE(rules.ok()) << rules.status();
  EXPECT_EQ(rules->text,
            "p ::= [ !#-\\x5B\\x5D-wy-~\\u0080-\\uD7FF\\uE000-\\U0010FFFF]+ \".\" p-1\n"
            "p-1 ::= \"a\" | \"b\"\n");
  EXPECT_GT(rules->elements, 0);
  absl::StatusOr<RegexRules> quote =
      RegexToGbnfRules("a\"", ConstraintLimits(), "p", /*json_string_content=*/true, 1000);
  ASSERT_FALSE(quote.ok());
  EXPECT_THAT(quote.status().message(),
              HasSubstr("regex at offset 1: matches only characters a JSON string must escape"));
  EXPECT_FALSE(
      RegexToGbnfRules("a{2000}", ConstraintLimits(), "p", /*json_string_content=*/true, 1000)
          .ok());
}

// The acceptance data (regex_cases.h) is right: every pattern compiles, and where std::regex
// reads the pattern the same way it agrees with the data.
TEST(RegexGrammarTest, AcceptanceCasesAgreeWithStdRegex) {
  for (const RegexCase& c : RegexCases()) {
    EXPECT_TRUE(RegexToGbnf(c.pattern, ConstraintLimits()).ok()) << c.pattern;
    if (!c.ecmascript) continue;
    const std::regex re(c.pattern, std::regex::ECMAScript);
    for (const std::string& s : c.valid) EXPECT_TRUE(std::regex_match(s, re)) << c.pattern << " " << s;
    for (const std::string& s : c.invalid) {
      EXPECT_FALSE(std::regex_match(s, re)) << c.pattern << " " << s;
    }
  }
}

// End to end: each pattern's grammar accepts its valid strings and rejects the others.
TEST(RegexGrammarTest, AcceptsMatchesAndRejectsTheRest) {
  for (const RegexCase& c : RegexCases()) {
    const auto constraint = CompileForBytes({ConstraintKind::kRegex, c.pattern});
    ASSERT_NE(constraint, nullptr) << c.pattern;
    for (const std::string& s : c.valid) EXPECT_TRUE(Accepts(constraint, s)) << c.pattern << " " << s;
    for (const std::string& s : c.invalid) EXPECT_FALSE(Accepts(constraint, s)) << c.pattern << " " << s;
  }
}

// Every random string the masks allow matches (printable ASCII, where std::regex reads every
// pattern of the data as we do).
TEST(RegexGrammarTest, RandomOutputsMatch) {
  std::mt19937 rng(27);
  for (const RegexCase& c : RegexCases()) {
    if (!c.ecmascript) continue;
    const auto constraint = CompileForBytes({ConstraintKind::kRegex, c.pattern});
    ASSERT_NE(constraint, nullptr) << c.pattern;
    const std::regex re(c.pattern, std::regex::ECMAScript);
    int finished = 0;
    for (int i = 0; i < 200; ++i) {
      const std::optional<std::string> s = RandomDocument(constraint, rng, 200);
      if (!s.has_value()) continue;
      ++finished;
      EXPECT_TRUE(std::regex_match(*s, re)) << c.pattern << " generated \"" << *s << "\"";
    }
    EXPECT_GT(finished, 100) << c.pattern;
  }
}

// Random strings over a small alphabet: the grammar and std::regex agree on every one.
TEST(RegexGrammarTest, AgreesWithStdRegexOnRandomStrings) {
  const char* patterns[] = {"(ab|a)*b?", "[a-c]{1,3}(c|ba)+", "a?b*c+", "(a|b|c)*abc",
                            "[^a]+a{2}", "(?:a|bc?){2,4}", R"(\w\d?\s*)", "(a(b(c)?)?)+"};
  std::mt19937 rng(27);
  const std::string alphabet = "abc1 _";
  for (const char* pattern : patterns) {
    const auto constraint = CompileForBytes({ConstraintKind::kRegex, pattern});
    ASSERT_NE(constraint, nullptr) << pattern;
    const std::regex re(pattern, std::regex::ECMAScript);
    for (int i = 0; i < 300; ++i) {
      std::string s;
      for (int n = static_cast<int>(rng() % 8); n > 0; --n) s += alphabet[rng() % alphabet.size()];
      EXPECT_EQ(Accepts(constraint, s), std::regex_match(s, re)) << pattern << " on \"" << s << "\"";
    }
  }
}

}  // namespace
}  // namespace linserve
