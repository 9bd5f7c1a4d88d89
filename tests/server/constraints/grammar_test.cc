// ParseGbnf: the syntax (literals, classes, escapes, groups, repetitions, comments), the UTF-8
// lowering of code points (exact: only valid UTF-8, surrogates excluded), the errors with their
// byte offsets, left recursion, and the limits.
#include "server/constraints/grammar.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/constraints/parse_stacks.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

Grammar Parse(std::string_view gbnf, const ConstraintLimits& limits = {}) {
  auto grammar = ParseGbnf(gbnf, limits);
  EXPECT_TRUE(grammar.ok()) << grammar.status() << "\n" << gbnf;
  return grammar.ok() ? *std::move(grammar) : Grammar();
}

absl::Status ParseError(std::string_view gbnf, const ConstraintLimits& limits = {}) {
  auto grammar = ParseGbnf(gbnf, limits);
  EXPECT_FALSE(grammar.ok()) << gbnf;
  if (grammar.ok()) return absl::OkStatus();
  EXPECT_EQ(grammar.status().code(), absl::StatusCode::kInvalidArgument);
  return grammar.status();
}

// Whether `text` is a whole document of `grammar` (kPrefix: whether some document starts so).
enum class Match { kNo, kPrefix, kWhole };
Match MatchText(const Grammar& grammar, std::string_view text) {
  ParseStepper stepper(&grammar, 1 << 16);
  ParseStacks stacks, next;
  EXPECT_TRUE(stepper.Start(&stacks).ok());
  for (char c : text) {
    EXPECT_TRUE(stepper.Step(stacks, static_cast<uint8_t>(c), &next).ok());
    if (next.empty()) return Match::kNo;
    std::swap(stacks, next);
  }
  return stacks.can_end() ? Match::kWhole : Match::kPrefix;
}

bool Whole(const Grammar& grammar, std::string_view text) {
  return MatchText(grammar, text) == Match::kWhole;
}

TEST(GrammarTest, LiteralsSequencesAlternativesGroups) {
  const Grammar g = Parse(R"(root ::= "ab" "c" | ("x" | "y") "z"
)");
  EXPECT_TRUE(Whole(g, "abc"));
  EXPECT_TRUE(Whole(g, "xz"));
  EXPECT_TRUE(Whole(g, "yz"));
  EXPECT_EQ(MatchText(g, "ab"), Match::kPrefix);
  EXPECT_EQ(MatchText(g, "abcd"), Match::kNo);
  EXPECT_EQ(MatchText(g, "xy"), Match::kNo);
  EXPECT_EQ(MatchText(g, ""), Match::kPrefix);
}

// Alternatives sharing a prefix are factored; the language stays the same.
TEST(GrammarTest, SharedPrefixesKeepTheLanguage) {
  const Grammar g = Parse(R"(root ::= "ab" | "abc" | "abd" | "b" | "ab" | "a" x
x ::= "bd" | "e")");
  for (const char* text : {"ab", "abc", "abd", "b", "ae"}) EXPECT_TRUE(Whole(g, text)) << text;
  for (const char* text : {"a", "abcd", "abe", "", "bb"}) EXPECT_FALSE(Whole(g, text)) << text;
}

TEST(GrammarTest, RulesCommentsAndLines) {
  const Grammar g = Parse(R"(# a comment line
root ::= greeting " " name   # trailing comment
greeting ::= "hi" |
  "hello"
name ::= (
  "bob"
  | "al"
)
)");
  EXPECT_TRUE(Whole(g, "hi bob"));
  EXPECT_TRUE(Whole(g, "hello al"));
  EXPECT_FALSE(Whole(g, "hello"));
  // Names may hold letters, digits, '-' and '_'; a rule may be used before it is defined.
  const Grammar h = Parse("root ::= a-b_1\na-b_1 ::= \"x\"");
  EXPECT_TRUE(Whole(h, "x"));
}

// The layout of llama.cpp's grammars: a rule's body on the lines after `::=`, groups over
// several lines, an empty first alternative, comments after alternatives.
TEST(GrammarTest, MultiLineRulesAsLlamaCppWritesThem) {
  const Grammar g = Parse(R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-7]{0,15})? ws

# Optional space
ws ::= | " " | "\n" [ \t]{0,20}
)");
  EXPECT_TRUE(Whole(g, R"({"a": [1, "x\n", true], "b":{}})"));
  EXPECT_FALSE(Whole(g, R"({"a": [1, "x\q"]})"));
}

TEST(GrammarTest, Escapes) {
  const Grammar g = Parse(R"(root ::= "\x41\u00e9\U0001F600\t\n\r\\\"\[\]\-"
)");
  EXPECT_TRUE(Whole(g, "A\xC3\xA9\xF0\x9F\x98\x80\t\n\r\\\"[]-"));
  const Grammar c = Parse(R"(root ::= [\]\[\-\x30]+
)");
  EXPECT_TRUE(Whole(c, "][-0"));
  EXPECT_FALSE(Whole(c, "1"));
  // A literal character is its UTF-8 bytes.
  const Grammar u = Parse("root ::= \"\xE4\xB8\xAD\"");
  EXPECT_TRUE(Whole(u, "\xE4\xB8\xAD"));
}

TEST(GrammarTest, Classes) {
  const Grammar g = Parse(R"(root ::= [a-z0-9_]+ [^a-z]
)");
  EXPECT_TRUE(Whole(g, "ab_9A"));
  EXPECT_TRUE(Whole(g, "x\xC3\xA9"));
  EXPECT_FALSE(Whole(g, "ab"));
  EXPECT_FALSE(Whole(g, "Ab"));
  // '-' before ']' is itself.
  const Grammar dash = Parse("root ::= [a-]");
  EXPECT_TRUE(Whole(dash, "-"));
  EXPECT_TRUE(Whole(dash, "a"));
  const Grammar dot = Parse("root ::= . .");
  EXPECT_TRUE(Whole(dot, "a\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(Whole(dot, "a"));
}

// What a code point is in UTF-8, for the exhaustive checks.
std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// [^"\\] accepts exactly the valid UTF-8 encodings of every scalar value but '"' and '\': checked
// on every code point, and on every 1- and 2-byte string and 200000 random 3- and 4-byte strings
// (which it must accept exactly when they are one valid character).
TEST(GrammarTest, NegatedClassIsExactUtf8) {
  const Grammar g = Parse(R"(root ::= [^"\\]
)");
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    if (surrogate) continue;
    ASSERT_EQ(Whole(g, Utf8(cp)), cp != '"' && cp != '\\') << cp;
  }
  // The reference: decode one character strictly.
  const auto one_valid_char = [](const std::string& s) {
    const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    uint32_t cp;
    size_t n;
    if (b(0) < 0x80) {
      cp = b(0), n = 1;
    } else if ((b(0) & 0xE0) == 0xC0) {
      cp = b(0) & 0x1F, n = 2;
    } else if ((b(0) & 0xF0) == 0xE0) {
      cp = b(0) & 0x0F, n = 3;
    } else if ((b(0) & 0xF8) == 0xF0) {
      cp = b(0) & 0x07, n = 4;
    } else {
      return false;
    }
    if (s.size() != n) return false;
    for (size_t i = 1; i < n; ++i) {
      if ((b(i) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b(i) & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    return cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF) && cp != '"' &&
           cp != '\\';
  };
  for (int a = 0; a < 256; ++a) {
    const std::string one(1, static_cast<char>(a));
    ASSERT_EQ(Whole(g, one), one_valid_char(one)) << a;
    for (int b = 0; b < 256; ++b) {
      const std::string two = one + static_cast<char>(b);
      ASSERT_EQ(Whole(g, two), one_valid_char(two)) << a << " " << b;
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    std::string s(3 + i % 2, '\0');
    // Biased to lead and continuation bytes, so that valid ones are common.
    s[0] = static_cast<char>(0xE0 + rng() % 32);
    for (size_t j = 1; j < s.size(); ++j) s[j] = static_cast<char>(0x70 + rng() % 0x60);
    ASSERT_EQ(Whole(g, s), one_valid_char(s)) << i;
  }
}

TEST(GrammarTest, Repetitions) {
  const Grammar g = Parse(R"(root ::= "a"{3} "b"{2,4} "c"{2,} "d"? "e"* "f"+ "xy"{2}
)");
  EXPECT_TRUE(Whole(g, "aaabbccfxyxy"));
  EXPECT_TRUE(Whole(g, "aaabbbbcccccdeeeffxyxy"));
  EXPECT_FALSE(Whole(g, "aabbccfxyxy"));
  EXPECT_FALSE(Whole(g, "aaabbbbbccfxyxy"));
  EXPECT_FALSE(Whole(g, "aaabbcfxyxy"));
  EXPECT_FALSE(Whole(g, "aaabbccddfxyxy"));
  EXPECT_FALSE(Whole(g, "aaabbccxyxy"));
  EXPECT_FALSE(Whole(g, "aaabbccfxy"));
  const Grammar zero = Parse("root ::= \"a\"{0} \"b\"{0,1}");
  EXPECT_TRUE(Whole(zero, ""));
  EXPECT_TRUE(Whole(zero, "b"));
  EXPECT_FALSE(Whole(zero, "a"));
}

TEST(GrammarTest, ErrorsGiveByteOffsets) {
  EXPECT_THAT(ParseError("root = \"a\"").message(), HasSubstr("at byte 5: expected '::='"));
  EXPECT_THAT(ParseError("root ::= \"abc").message(),
              HasSubstr("at byte 9: unterminated literal"));
  EXPECT_THAT(ParseError("root ::= \"\\q\"").message(), HasSubstr("at byte 10: unknown escape"));
  EXPECT_THAT(ParseError("root ::= [a").message(),
              HasSubstr("at byte 9: unterminated character class"));
  EXPECT_THAT(ParseError("root ::= [z-a]").message(), HasSubstr("at byte 11"));
  EXPECT_THAT(ParseError("root ::= \"\\x4\"").message(), HasSubstr("at byte 10: expected 2 hex"));
  EXPECT_THAT(ParseError("root ::= \"\\U00110000\"").message(), HasSubstr("above U+10FFFF"));
  EXPECT_THAT(ParseError("root ::= \"\\uD800\"").message(), HasSubstr("surrogate"));
  EXPECT_THAT(ParseError("root ::= \"\xC0\x80\"").message(),
              HasSubstr("at byte 10: invalid UTF-8"));
  EXPECT_THAT(ParseError("root ::= (\"a\"").message(), HasSubstr("at byte 13: expected ')'"));
  EXPECT_THAT(ParseError("root ::= * \"a\"").message(),
              HasSubstr("at byte 9: '*' follows nothing"));
  EXPECT_THAT(ParseError("root ::= \"a\"{3,2}").message(), HasSubstr("max below min"));
  EXPECT_THAT(ParseError("root ::= \"a\"{x}").message(), HasSubstr("expected a number"));
  EXPECT_THAT(ParseError("root ::= \"a\" )").message(),
              HasSubstr("at byte 13: expected a newline or the end"));
  EXPECT_THAT(ParseError("root ::= x\nx ::= \"a\"\nx ::= \"b\"").message(),
              HasSubstr("at byte 21: rule 'x' is defined twice"));
  EXPECT_THAT(ParseError("root ::= \"a\" foo \"b\"").message(),
              HasSubstr("at byte 13: undefined rule 'foo'"));
  EXPECT_THAT(ParseError("start ::= \"a\"").message(), HasSubstr("no rule 'root'"));
  EXPECT_THAT(ParseError("root ::= \"a\" root").message(),
              HasSubstr("rule 'root' matches no finite string"));
  EXPECT_THAT(ParseError("root ::= [^\\x00-\\U0010FFFF]").message(),
              HasSubstr("rule 'root' matches no finite string"));
}

TEST(GrammarTest, LeftRecursionIsRefusedNamingTheRule) {
  EXPECT_THAT(ParseError("root ::= root \"a\" | \"b\"").message(),
              HasSubstr("at byte 0: rule 'root' is left-recursive"));
  EXPECT_THAT(ParseError("root ::= \"x\" expr\nexpr ::= term \"+\" | \"1\"\nterm ::= expr \"*\"")
                  .message(),
              HasSubstr("is left-recursive"));
  // Through a prefix that can match nothing.
  EXPECT_THAT(ParseError("root ::= \"x\" list\nlist ::= opt list \"a\" | \"b\"\nopt ::= \"c\"?")
                  .message(),
              HasSubstr("rule 'list' is left-recursive"));
  // A repetition of something that can match nothing.
  EXPECT_THAT(ParseError("root ::= (\"a\"?)*").message(),
              HasSubstr("rule 'root' is left-recursive"));
  // Right recursion is fine.
  const Grammar g = Parse("root ::= \"a\" root | \"b\"");
  EXPECT_TRUE(Whole(g, "aaab"));
}

TEST(GrammarTest, Limits) {
  ConstraintLimits limits;
  limits.max_text_bytes = 10;
  EXPECT_THAT(ParseError("root ::= \"abc\"", limits).message(), HasSubstr("max_text_bytes (10)"));

  limits = {};
  limits.max_grammar_elements = 1000;
  EXPECT_THAT(ParseError("root ::= \"a\"{5000}", limits).message(),
              HasSubstr("max_grammar_elements (1000)"));
  EXPECT_THAT(ParseError("root ::= \"ab\"{2,5000}", limits).message(),
              HasSubstr("max_grammar_elements (1000)"));
  EXPECT_THAT(ParseError("root ::= \"a\"{99999999999}", limits).message(),
              HasSubstr("repetition count above"));
  // Repetitions of repetitions cost their counts added, not multiplied.
  const Grammar nested = Parse("root ::= ((\"a\"{100}){100}){100}", limits);
  EXPECT_LE(nested.num_elements(), 400);
  // Classes count their byte sequences, each distinct class once.
  const Grammar classes = Parse("root ::= [^\"] [^\"] [^\"] [^\"]", limits);
  EXPECT_LT(classes.num_elements(), 40);

  limits = {};
  limits.max_nesting_depth = 8;
  std::string deep = "root ::= " + std::string(9, '(') + "\"a\"" + std::string(9, ')');
  EXPECT_THAT(ParseError(deep, limits).message(), HasSubstr("max_nesting_depth (8)"));
  deep = "root ::= " + std::string(8, '(') + "\"a\"" + std::string(8, ')');
  EXPECT_TRUE(Whole(Parse(deep, limits), "a"));
}

}  // namespace
}  // namespace linserve
