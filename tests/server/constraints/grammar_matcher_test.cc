// GrammarMatcher over TokenVocabulary: accepting and refusing documents through byte tokens and
// through multi-byte tokens (spanning grammar symbols, splitting a UTF-8 character, space-prefixed
// pieces, specials, eos); FillMask against brute force; Serialize/Deserialize; hostile grammars
// bounded by the limits; the mask cache; CompileConstraint's errors and ConstraintCache.
#include "server/constraints/grammar_matcher.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "server/constraints/grammar.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// A tokenizer of given pieces (its id is its index); "" is a special.
class PieceTokenizer final : public Tokenizer {
 public:
  explicit PieceTokenizer(std::vector<std::string> pieces) : pieces_(std::move(pieces)) {}
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  absl::StatusOr<std::vector<TokenId>> EncodeAtMost(std::string_view, size_t) const override {
    return absl::UnimplementedError("PieceTokenizer does not encode");
  }
  std::string TokenBytes(TokenId id) const override {
    return id >= 0 && id < vocab_size() ? pieces_[id] : "";
  }

 private:
  std::vector<std::string> pieces_;
};

constexpr char kJsonGrammar[] = R"(root ::= ws value ws
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*
)";

// Byte ids 0..255, specials 256..259, eos 257.
constexpr TokenId kByteEos = 257;
std::shared_ptr<const TokenVocabulary> ByteVocabulary() {
  static const auto vocabulary = TokenVocabulary::Create(ByteTokenizer(260), kByteEos);
  return vocabulary;
}

std::shared_ptr<const CompiledConstraint> Compile(std::string_view gbnf,
                                                  std::shared_ptr<const TokenVocabulary> vocabulary,
                                                  const ConstraintLimits& limits = {}) {
  auto compiled = CompileConstraint({ConstraintKind::kGrammar, std::string(gbnf)},
                                    std::move(vocabulary), limits, "constraint.grammar");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

std::vector<uint32_t> Mask(const GrammarMatcher& matcher) {
  std::vector<uint32_t> mask(matcher.constraint().vocabulary().mask_words());
  const absl::Status status = matcher.FillMask(absl::MakeSpan(mask));
  EXPECT_TRUE(status.ok()) << status;
  return mask;
}

bool Allowed(const std::vector<uint32_t>& mask, TokenId token) {
  return (mask[token / 32] >> (token % 32)) & 1;
}

// Feeds `text` as byte tokens; the status of the first refused one.
absl::Status AcceptBytes(GrammarMatcher& matcher, std::string_view text) {
  for (char c : text) {
    if (auto status = matcher.Accept(static_cast<uint8_t>(c)); !status.ok()) return status;
  }
  return absl::OkStatus();
}

bool WholeDocument(std::string_view gbnf, std::string_view text) {
  GrammarMatcher matcher(Compile(gbnf, ByteVocabulary()));
  return AcceptBytes(matcher, text).ok() && matcher.CanEnd();
}

TEST(GrammarMatcherTest, ByteTokensAcceptAndRefuse) {
  EXPECT_TRUE(WholeDocument(kJsonGrammar, R"({"a": [1, 2.5e3, "x\u00e9\n"], "b": null})"));
  EXPECT_TRUE(WholeDocument(kJsonGrammar, " \"caf\xC3\xA9 \xE4\xB8\xAD\" "));
  EXPECT_FALSE(WholeDocument(kJsonGrammar, R"({"a": [1, 2,]})"));
  EXPECT_FALSE(WholeDocument(kJsonGrammar, R"({"a": 01})"));
  EXPECT_FALSE(WholeDocument(kJsonGrammar, "\"\xC3\""));  // a truncated character
  EXPECT_FALSE(WholeDocument(kJsonGrammar, "{"));         // a prefix only

  GrammarMatcher matcher(Compile(kJsonGrammar, ByteVocabulary()));
  ASSERT_TRUE(AcceptBytes(matcher, "[1").ok());
  const std::string before = matcher.Serialize();
  const absl::Status refused = matcher.Accept('}');
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(matcher.Serialize(), before);  // unchanged
  EXPECT_EQ(matcher.Accept(256).code(), absl::StatusCode::kInvalidArgument);  // a special
  EXPECT_EQ(matcher.Accept(kByteEos).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(matcher.Accept(100000).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(matcher.Accept(']').ok());
  EXPECT_TRUE(matcher.CanEnd());
  EXPECT_FALSE(matcher.IsComplete());  // whitespace may follow
  ASSERT_TRUE(matcher.Accept(kByteEos).ok());
  EXPECT_TRUE(matcher.ended());
  EXPECT_EQ(matcher.Accept(' ').code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> ended = Mask(matcher);
  EXPECT_TRUE(std::all_of(ended.begin(), ended.end(), [](uint32_t w) { return w == 0; }));
}

TEST(GrammarMatcherTest, ByteMaskIsTheNextBytes) {
  GrammarMatcher matcher(Compile(R"(root ::= "a" [0-9] | "b")", ByteVocabulary()));
  std::vector<uint32_t> mask = Mask(matcher);
  for (TokenId t = 0; t < 260; ++t) EXPECT_EQ(Allowed(mask, t), t == 'a' || t == 'b') << t;
  ASSERT_TRUE(matcher.Accept('a').ok());
  mask = Mask(matcher);
  for (TokenId t = 0; t < 260; ++t) EXPECT_EQ(Allowed(mask, t), t >= '0' && t <= '9') << t;
  ASSERT_TRUE(matcher.Accept('7').ok());
  mask = Mask(matcher);
  for (TokenId t = 0; t < 260; ++t) EXPECT_EQ(Allowed(mask, t), t == kByteEos) << t;
  EXPECT_TRUE(matcher.IsComplete());
}

// Pieces: 0 <s> and 1 </s> (eos) are specials.
std::shared_ptr<const TokenVocabulary> PieceVocabulary() {
  static const auto vocabulary = TokenVocabulary::Create(
      PieceTokenizer({"", "", "{\"", "a\":", " 1", "23", "}", "1", "\"", "a", ":", " ", "{",
                      "\xC3", "\xA9", "\xC3\xA9", " hello", " world", "hello", "x", "say",
                      "\xC3\xA9\xC3"}),
      1);
  return vocabulary;
}

TokenId Piece(std::string_view bytes) {
  const auto& vocabulary = *PieceVocabulary();
  for (TokenId t = 0; t < vocabulary.vocab_size(); ++t) {
    if (vocabulary.bytes(t) == bytes) return t;
  }
  ADD_FAILURE() << "no piece " << bytes;
  return 0;
}

std::vector<std::string> AllowedPieces(const GrammarMatcher& matcher) {
  const std::vector<uint32_t> mask = Mask(matcher);
  std::vector<std::string> pieces;
  for (TokenId t = 0; t < PieceVocabulary()->vocab_size(); ++t) {
    if (Allowed(mask, t))
      pieces.push_back(t == 1 ? "</s>" : std::string(PieceVocabulary()->bytes(t)));
  }
  return pieces;
}

TEST(GrammarMatcherTest, TokensSpanningSymbols) {
  using ::testing::UnorderedElementsAre;
  GrammarMatcher matcher(Compile(R"(root ::= "{" ws "\"a\"" ws ":" ws [0-9]+ ws "}"
ws ::= " "?)",
                                 PieceVocabulary()));
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("{\"", "{"));
  ASSERT_TRUE(matcher.Accept(Piece("{\"")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("a\":", "a"));
  ASSERT_TRUE(matcher.Accept(Piece("a\":")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre(" 1", "23", "1", " "));
  ASSERT_TRUE(matcher.Accept(Piece(" 1")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("23", "1", " ", "}"));
  EXPECT_FALSE(matcher.CanEnd());
  ASSERT_TRUE(matcher.Accept(Piece("}")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("</s>"));
  EXPECT_TRUE(matcher.IsComplete());
  ASSERT_TRUE(matcher.Accept(1).ok());
  EXPECT_TRUE(matcher.ended());
}

TEST(GrammarMatcherTest, Utf8CharacterSplitAcrossTokens) {
  using ::testing::UnorderedElementsAre;
  GrammarMatcher matcher(Compile(R"(root ::= "é"+)", PieceVocabulary()));
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("\xC3", "\xC3\xA9", "\xC3\xA9\xC3"));
  ASSERT_TRUE(matcher.Accept(Piece("\xC3")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("\xA9"));
  ASSERT_TRUE(matcher.Accept(Piece("\xA9")).ok());
  EXPECT_THAT(AllowedPieces(matcher),
              UnorderedElementsAre("\xC3", "\xC3\xA9", "\xC3\xA9\xC3", "</s>"));
  ASSERT_TRUE(matcher.Accept(Piece("\xC3\xA9\xC3")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("\xA9"));
  // Under a class of any character, a lone continuation byte is never allowed.
  GrammarMatcher any(Compile("root ::= .*", PieceVocabulary()));
  const std::vector<std::string> pieces = AllowedPieces(any);
  EXPECT_THAT(pieces, ::testing::Not(::testing::Contains("\xA9")));
  EXPECT_THAT(pieces, ::testing::Contains("\xC3"));
}

TEST(GrammarMatcherTest, SpacePrefixedPieces) {
  using ::testing::UnorderedElementsAre;
  GrammarMatcher matcher(Compile(R"(root ::= "say" (" " [a-z]+)+)", PieceVocabulary()));
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre("say"));
  ASSERT_TRUE(matcher.Accept(Piece("say")).ok());
  EXPECT_THAT(AllowedPieces(matcher), UnorderedElementsAre(" hello", " world", " "));
  ASSERT_TRUE(matcher.Accept(Piece(" hello")).ok());
  EXPECT_THAT(AllowedPieces(matcher),
              UnorderedElementsAre(" hello", " world", " ", "hello", "x", "a", "say", "</s>"));
  EXPECT_EQ(matcher.Accept(Piece("\"")).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(matcher.Accept(0).code(), absl::StatusCode::kInvalidArgument);  // a special
}

TEST(GrammarMatcherTest, NoEosInTheVocabulary) {
  auto vocabulary = TokenVocabulary::Create(ByteTokenizer(256), -1);
  GrammarMatcher matcher(Compile(R"(root ::= "ab")", vocabulary));
  ASSERT_TRUE(AcceptBytes(matcher, "ab").ok());
  EXPECT_TRUE(matcher.IsComplete());
  const std::vector<uint32_t> mask = Mask(matcher);
  EXPECT_TRUE(std::all_of(mask.begin(), mask.end(), [](uint32_t w) { return w == 0; }));
}

// FillMask against brute force: on a vocabulary of random byte strings, at random reachable
// states, a token is allowed exactly when feeding its bytes one at a time (to a byte-vocabulary
// matcher restored from the same state) succeeds, and eos exactly when the document may end.
void CheckAgainstBruteForce(std::string_view gbnf, std::string_view alphabet, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> pieces{"", ""};  // a special and eos
  for (int b = 0; b < 128; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  while (pieces.size() < 3000) {
    std::string piece(1 + rng() % 6, '\0');
    for (char& c : piece) c = alphabet[rng() % alphabet.size()];
    pieces.push_back(std::move(piece));
  }
  auto vocabulary = TokenVocabulary::Create(PieceTokenizer(pieces), 1);
  auto compiled = Compile(gbnf, vocabulary);
  auto by_bytes = Compile(gbnf, ByteVocabulary());
  ASSERT_NE(compiled, nullptr);
  GrammarMatcher matcher(compiled);
  int documents = 0, checked = 0;
  for (int step = 0; step < 400; ++step) {
    const std::vector<uint32_t> mask = Mask(matcher);
    const std::string state = matcher.Serialize();
    std::vector<TokenId> allowed;
    for (TokenId t = 0; t < vocabulary->vocab_size(); ++t) {
      bool expected;
      if (t == 1) {
        expected = matcher.CanEnd();
      } else if (pieces[t].empty()) {
        expected = false;
      } else {
        auto brute = GrammarMatcher::Deserialize(by_bytes, state);
        ASSERT_TRUE(brute.ok()) << brute.status();
        expected = AcceptBytes(*brute, pieces[t]).ok();
      }
      ASSERT_EQ(Allowed(mask, t), expected) << "token " << t << " '" << pieces[t] << "' step "
                                            << step;
      if (expected) allowed.push_back(t);
      ++checked;
    }
    ASSERT_FALSE(allowed.empty());
    const TokenId next = allowed[rng() % allowed.size()];
    if (next == 1 || matcher.IsComplete()) {
      matcher = GrammarMatcher(compiled);
      ++documents;
      continue;
    }
    ASSERT_TRUE(matcher.Accept(next).ok());
  }
  EXPECT_GT(checked, 1000000);
  (void)documents;
}

TEST(GrammarMatcherTest, FillMaskMatchesBruteForceJson) {
  CheckAgainstBruteForce(kJsonGrammar,
                         "{}[]\":,.-+0123456789eE truefalsn\\u\n\xC3\xA9\xE4\xB8\xAD\x01", 1);
}

TEST(GrammarMatcherTest, FillMaskMatchesBruteForceUtf8Words) {
  CheckAgainstBruteForce(R"(root ::= (word " ")* word ("!" | "?")?
word ::= [a-z\u00e9\u4e2d]+ | "\u4e2d\u6587" | [^ !?\x00-\x7f]{1,3})",
                         "abcz !?\xC3\xA9\xE4\xB8\xAD\xE6\x96\x87\xF0\x9F\x98\x80", 2);
}

TEST(GrammarMatcherTest, SerializeRoundTrip) {
  auto compiled = Compile(kJsonGrammar, ByteVocabulary());
  GrammarMatcher matcher(compiled);
  ASSERT_TRUE(AcceptBytes(matcher, R"({"key": [1, {"x": "ab)").ok());
  const std::string bytes = matcher.Serialize();
  auto restored = GrammarMatcher::Deserialize(compiled, bytes);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Serialize(), bytes);
  EXPECT_EQ(Mask(*restored), Mask(matcher));
  ASSERT_TRUE(AcceptBytes(*restored, R"(c"}]})").ok());
  EXPECT_TRUE(restored->CanEnd());
  ASSERT_TRUE(restored->Accept(kByteEos).ok());
  auto ended = GrammarMatcher::Deserialize(compiled, restored->Serialize());
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_TRUE(ended->ended());
  // A fork is a copy: the two go their own ways.
  GrammarMatcher fork = matcher;
  ASSERT_TRUE(fork.Accept('"').ok());
  EXPECT_EQ(matcher.Serialize(), bytes);
}

TEST(GrammarMatcherTest, CorruptedStateIsRefused) {
  auto compiled = Compile(kJsonGrammar, ByteVocabulary());
  GrammarMatcher matcher(compiled);
  ASSERT_TRUE(AcceptBytes(matcher, R"([{"a": [1)").ok());
  const std::string good = matcher.Serialize();
  const auto refused = [&](const std::string& bytes) {
    auto restored = GrammarMatcher::Deserialize(compiled, bytes);
    if (restored.ok()) return false;
    EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(restored.status().message(), HasSubstr("constraint state"));
    return true;
  };
  for (size_t n = 0; n < good.size(); ++n) EXPECT_TRUE(refused(good.substr(0, n))) << n;
  EXPECT_TRUE(refused(good + "x"));
  std::string bad = good;
  bad[0] = 9;
  EXPECT_TRUE(refused(bad));
  bad = good;
  bad[1] = 2;
  EXPECT_TRUE(refused(bad));
  // One stack of one position outside the grammar; one at an end element; none.
  EXPECT_TRUE(refused(std::string("\x01\x00\x01\x01\xff\xff\x7f", 7)));
  const Grammar& grammar = compiled->grammar();
  int32_t end = 0;
  while (grammar.element(end).kind != Grammar::ElementKind::kEnd) ++end;
  EXPECT_TRUE(refused(std::string("\x01\x00\x01\x01", 4) + static_cast<char>(end)));
  EXPECT_TRUE(refused(std::string("\x01\x00\x00", 3)));
  // Two stacks out of order.
  EXPECT_TRUE(refused(std::string("\x01\x00\x02\x00\x00", 5)));
  // Random corruption never crashes; what is accepted is a state the matcher can work from.
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::string mutated = good;
    mutated[rng() % mutated.size()] = static_cast<char>(rng());
    auto restored = GrammarMatcher::Deserialize(compiled, mutated);
    if (restored.ok()) Mask(*restored);
  }
}

TEST(GrammarMatcherTest, ExponentialEmptyPathsAreBounded) {
  std::string gbnf = "root ::=";
  for (int i = 0; i < 40; ++i) gbnf += " e";
  gbnf += " \"b\"\ne ::= \"\" | x\nx ::= \"\"";
  auto compiled = CompileConstraint({ConstraintKind::kGrammar, gbnf}, ByteVocabulary(), {},
                                    "constraint.grammar");
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(compiled.status().message(), HasSubstr("constraint.grammar: at the start"));
  EXPECT_THAT(compiled.status().message(), HasSubstr("too ambiguous"));
}

TEST(GrammarMatcherTest, AmbiguityBeyondTheStackLimitIsResourceExhausted) {
  ConstraintLimits limits;
  limits.max_matcher_stacks = 64;
  GrammarMatcher matcher(Compile(R"(root ::= s
s ::= "a" s "b" | t
t ::= "a" s "c" | "")",
                                 ByteVocabulary(), limits));
  absl::Status status;
  int accepted = 0;
  for (; accepted < 20; ++accepted) {
    const std::string before = matcher.Serialize();
    status = matcher.Accept('a');
    if (!status.ok()) {
      EXPECT_EQ(matcher.Serialize(), before);
      break;
    }
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("max_matcher_stacks (64)"));
  // After k a's, 3 * 2^k stacks: 48 fit, 96 do not.
  EXPECT_EQ(accepted, 4);
}

// Alternatives are left-factored: an enum of 3000 strings needs one stack per distinct next
// byte, not one per value.
TEST(GrammarMatcherTest, LargeEnumsStayWithinFewStacks) {
  ConstraintLimits limits;
  limits.max_matcher_stacks = 16;
  std::string gbnf = "root ::= \"\\\"v0\\\"\"";
  for (int i = 1; i < 3000; ++i) gbnf += " | \"\\\"v" + std::to_string(i) + "\\\"\"";
  auto compiled = Compile(gbnf, ByteVocabulary(), limits);
  ASSERT_NE(compiled, nullptr);
  for (const char* value : {"\"v0\"", "\"v2999\"", "\"v123\"", "\"v12\""}) {
    GrammarMatcher matcher(compiled);
    ASSERT_TRUE(AcceptBytes(matcher, value).ok()) << value;
    EXPECT_TRUE(matcher.IsComplete()) << value;
  }
  GrammarMatcher matcher(compiled);
  EXPECT_FALSE(AcceptBytes(matcher, "\"v3000\"").ok());
}

TEST(GrammarMatcherTest, DeepDocumentsAndLongRepetitions) {
  GrammarMatcher matcher(Compile(kJsonGrammar, ByteVocabulary()));
  ASSERT_TRUE(AcceptBytes(matcher, std::string(3000, '[')).ok());
  EXPECT_FALSE(matcher.CanEnd());
  ASSERT_TRUE(AcceptBytes(matcher, std::string(3000, ']')).ok());
  EXPECT_TRUE(matcher.CanEnd());
  // A repetition is a tail call: 100000 items leave one short stack.
  GrammarMatcher list(Compile(R"(root ::= ("a" | "b")* "c")", ByteVocabulary()));
  ASSERT_TRUE(AcceptBytes(list, std::string(100000, 'a')).ok());
  EXPECT_LT(list.Serialize().size(), 16u);
  GrammarMatcher counted(Compile(R"(root ::= "a"{5000})", ByteVocabulary()));
  ASSERT_TRUE(AcceptBytes(counted, std::string(4999, 'a')).ok());
  EXPECT_FALSE(counted.CanEnd());
  ASSERT_TRUE(counted.Accept('a').ok());
  EXPECT_TRUE(counted.IsComplete());
}

TEST(GrammarMatcherTest, MaskCache) {
  ConstraintLimits limits;
  limits.max_cached_masks = 2;
  auto compiled = Compile(kJsonGrammar, PieceVocabulary(), limits);
  GrammarMatcher matcher(compiled);
  EXPECT_EQ(compiled->cached_masks(), 0);
  const std::vector<uint32_t> first = Mask(matcher);
  EXPECT_EQ(compiled->cached_masks(), 1);
  GrammarMatcher other(compiled);  // the same state: a hit
  EXPECT_EQ(Mask(other), first);
  EXPECT_EQ(compiled->cached_masks(), 1);
  ASSERT_TRUE(matcher.Accept(Piece("{\"")).ok());
  const std::vector<uint32_t> second = Mask(matcher);
  EXPECT_NE(second, first);
  EXPECT_EQ(compiled->cached_masks(), 2);
  // Inside a string every character leads back to the same stacks: a hit.
  ASSERT_TRUE(matcher.Accept(Piece("a")).ok());
  EXPECT_EQ(Mask(matcher), second);
  EXPECT_EQ(compiled->cached_masks(), 2);
  ASSERT_TRUE(matcher.Accept(Piece("\"")).ok());
  Mask(matcher);  // full: emptied, then this one
  EXPECT_EQ(compiled->cached_masks(), 1);
  // Masks computed afresh agree with the cached ones.
  GrammarMatcher again(compiled);
  EXPECT_EQ(Mask(again), first);
  std::vector<uint32_t> wrong(3);
  EXPECT_EQ(matcher.FillMask(absl::MakeSpan(wrong)).code(), absl::StatusCode::kInvalidArgument);
}

// The cache keeps a mask as bits, allowed ids or refused ids, whichever is smallest; each form
// gives back the mask computed afresh.
TEST(GrammarMatcherTest, CachedMasksInEveryForm) {
  std::vector<std::string> pieces{"", ""};  // a special, eos
  for (int i = 0; i < 998; ++i) pieces.push_back(absl::StrCat("t", i));
  auto vocabulary = TokenVocabulary::Create(PieceTokenizer(pieces), 1);
  const auto count = [](const std::vector<uint32_t>& mask) {
    int n = 0;
    for (uint32_t word : mask) n += __builtin_popcount(word);
    return n;
  };
  // Nearly all allowed (refused ids), one allowed (allowed ids), half allowed (bits).
  const struct {
    const char* gbnf;
    int allowed;
  } cases[] = {{"root ::= [a-z0-9]+", 998},
               {"root ::= \"t5\"", 1},
               {"root ::= \"t\" [0-4] [0-9]*", 445}};  // t0-t4, t10-t49, t100-t499
  for (const auto& c : cases) {
    auto compiled = Compile(c.gbnf, vocabulary);
    GrammarMatcher fresh(compiled);
    const std::vector<uint32_t> computed = Mask(fresh);
    EXPECT_EQ(count(computed), c.allowed) << c.gbnf;
    GrammarMatcher again(compiled);
    EXPECT_EQ(Mask(again), computed) << c.gbnf;
    EXPECT_EQ(compiled->cached_masks(), 1);
  }
}

TEST(CompileConstraintTest, ErrorsNameTheField) {
  ConstraintLimits limits;
  limits.max_text_bytes = 20;
  auto long_text = CompileConstraint({ConstraintKind::kGrammar, std::string(30, ' ')},
                                     ByteVocabulary(), limits, "constraint.grammar");
  EXPECT_EQ(long_text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(long_text.status().message(),
              HasSubstr("constraint.grammar: 30 bytes, above max_text_bytes (20)"));
  auto syntax = CompileConstraint({ConstraintKind::kGrammar, "root ::= ("}, ByteVocabulary(), {},
                                  "grammar");
  EXPECT_THAT(syntax.status().message(), HasSubstr("grammar: at byte 10: expected ')'"));
  // A json_object's grammar is longer than max_text_bytes, which bounds the request's text only.
  limits = {};
  limits.max_text_bytes = 1;
  EXPECT_TRUE(CompileConstraint({ConstraintKind::kJsonObject, ""}, ByteVocabulary(), limits,
                                "constraint.json_object")
                  .ok());
  limits = {};
  limits.cache_entries = 0;
  EXPECT_THAT(CompileConstraint({ConstraintKind::kGrammar, "root ::= \"a\""}, ByteVocabulary(),
                                limits, "grammar")
                  .status()
                  .message(),
              HasSubstr("cache_entries"));
}

TEST(ConstraintCacheTest, KeepsTheMostRecentlyUsed) {
  ConstraintLimits limits;
  limits.cache_entries = 2;
  ConstraintCache cache(ByteVocabulary(), limits);
  const ConstraintSpec a{ConstraintKind::kGrammar, "root ::= \"a\""};
  const ConstraintSpec b{ConstraintKind::kGrammar, "root ::= \"b\""};
  const ConstraintSpec c{ConstraintKind::kGrammar, "root ::= \"c\""};
  auto a1 = cache.Get(a, "g");
  ASSERT_TRUE(a1.ok());
  EXPECT_EQ(*cache.Get(a, "g"), *a1);
  ASSERT_TRUE(cache.Get(b, "g").ok());
  ASSERT_TRUE(cache.Get(a, "g").ok());  // a is now the most recent
  ASSERT_TRUE(cache.Get(c, "g").ok());  // evicts b
  EXPECT_EQ(*cache.Get(a, "g"), *a1);
  // The same text under another kind is another entry.
  const ConstraintSpec bad{ConstraintKind::kGrammar, "root ::= )"};
  auto failed = cache.Get(bad, "constraint.grammar");
  EXPECT_THAT(failed.status().message(), HasSubstr("constraint.grammar: at byte 9"));
  EXPECT_FALSE(cache.Get(bad, "constraint.grammar").ok());
  EXPECT_EQ(*cache.Get(a, "g"), *a1);

  // Thread-safe: many threads asking for a few specs get one compiled constraint per spec.
  ConstraintCache shared(ByteVocabulary(), ConstraintLimits{});
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const CompiledConstraint>> got(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        auto compiled = shared.Get(j % 2 ? a : b, "g");
        ASSERT_TRUE(compiled.ok());
        if (j == 49) got[i] = *compiled;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 1; i < 8; ++i) EXPECT_EQ(got[i], got[0]);
}

}  // namespace
}  // namespace linserve
