// Every constraint kind end to end: CompileConstraint over the compilers (JSON schema, json_object,
// regex) and ParseGbnf, then GrammarMatcher over a byte vocabulary: the compilers' acceptance
// data (documents each constraint must accept and must refuse), and documents sampled at random
// through the masks, checked by an independent parser (nlohmann::json); one cache and its
// masks shared between threads (the tsan stage runs this test).
#include "server/constraints/compiled_constraint.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "model/tokenizer/no_tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/constraints/grammar_matcher.h"
#include "tests/server/constraints/json_schema_cases.h"
#include "tests/server/constraints/regex_cases.h"

namespace linserve {
namespace {

constexpr TokenId kEos = 257;

std::shared_ptr<const TokenVocabulary> Bytes() {
  static const auto vocabulary = TokenVocabulary::Create(ByteTokenizer(260), kEos);
  return vocabulary;
}

std::shared_ptr<const CompiledConstraint> Compile(ConstraintKind kind, std::string text) {
  auto compiled = CompileConstraint({kind, std::move(text)}, Bytes(), {}, "constraint");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

// Whether the constraint accepts `document` whole.
bool Accepts(const std::shared_ptr<const CompiledConstraint>& compiled, std::string_view document) {
  GrammarMatcher matcher(compiled);
  for (char c : document) {
    if (!matcher.Accept(static_cast<uint8_t>(c)).ok()) return false;
  }
  return matcher.CanEnd();
}

// A document drawn through the masks: each byte uniformly among the allowed ones, eos (where
// allowed) with probability 1/4, at most `max_bytes`; "" when it does not end in time.
std::string Sample(const std::shared_ptr<const CompiledConstraint>& compiled, std::mt19937& rng,
                   int max_bytes) {
  GrammarMatcher matcher(compiled);
  std::string document;
  std::vector<uint32_t> mask(Bytes()->mask_words());
  for (int i = 0; i < max_bytes; ++i) {
    EXPECT_TRUE(matcher.FillMask(absl::MakeSpan(mask)).ok());
    const bool eos = (mask[kEos / 32] >> (kEos % 32)) & 1;
    if (eos && (matcher.IsComplete() || rng() % 4 == 0)) return document;
    std::vector<int> allowed;
    for (int b = 0; b < 256; ++b) {
      if ((mask[b / 32] >> (b % 32)) & 1) allowed.push_back(b);
    }
    EXPECT_FALSE(allowed.empty());
    const int b = allowed[rng() % allowed.size()];
    EXPECT_TRUE(matcher.Accept(b).ok());
    document += static_cast<char>(b);
  }
  return "";
}

TEST(CompiledConstraintTest, JsonSchemaAcceptanceCases) {
  for (const SchemaCase& c : SchemaCases()) {
    auto compiled = Compile(ConstraintKind::kJsonSchema, c.schema);
    ASSERT_NE(compiled, nullptr) << c.schema;
    for (const std::string& valid : c.valid) {
      EXPECT_TRUE(Accepts(compiled, valid)) << c.schema << "\n" << valid;
    }
    for (const std::string& invalid : c.invalid) {
      EXPECT_FALSE(Accepts(compiled, invalid)) << c.schema << "\n" << invalid;
    }
  }
}

TEST(CompiledConstraintTest, RegexAcceptanceCases) {
  for (const RegexCase& c : RegexCases()) {
    auto compiled = Compile(ConstraintKind::kRegex, c.pattern);
    ASSERT_NE(compiled, nullptr) << c.pattern;
    for (const std::string& valid : c.valid) {
      EXPECT_TRUE(Accepts(compiled, valid)) << c.pattern << "\n" << valid;
    }
    for (const std::string& invalid : c.invalid) {
      EXPECT_FALSE(Accepts(compiled, invalid)) << c.pattern << "\n" << invalid;
    }
  }
}

TEST(CompiledConstraintTest, JsonObjectSamplesParse) {
  auto compiled = Compile(ConstraintKind::kJsonObject, "");
  ASSERT_NE(compiled, nullptr);
  EXPECT_TRUE(Accepts(compiled, R"({"a": [1, {"b": null}], "c": "d\u00e9"})"));
  EXPECT_FALSE(Accepts(compiled, "[1]"));
  std::mt19937 rng(5);
  int complete = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string document = Sample(compiled, rng, 4000);
    if (document.empty()) continue;
    ++complete;
    const auto parsed = nlohmann::json::parse(document, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << document;
    EXPECT_TRUE(parsed.is_object()) << document;
  }
  EXPECT_GT(complete, 100);
}

TEST(CompiledConstraintTest, JsonSchemaSamplesParse) {
  for (const SchemaCase& c : SchemaCases()) {
    auto compiled = Compile(ConstraintKind::kJsonSchema, c.schema);
    ASSERT_NE(compiled, nullptr);
    std::mt19937 rng(6);
    for (int i = 0; i < 20; ++i) {
      const std::string document = Sample(compiled, rng, 4000);
      if (document.empty()) continue;
      EXPECT_FALSE(nlohmann::json::parse(document, nullptr, false).is_discarded())
          << c.schema << "\n" << document;
    }
  }
}

// Transport threads compile into one ConstraintCache while others fill masks of the constraints
// it returns; a cache of 2 entries and 8 masks keeps both evicting throughout.
TEST(CompiledConstraintTest, OneCacheSharedBetweenThreads) {
  ConstraintLimits limits;
  limits.cache_entries = 2;
  limits.max_cached_masks = 8;
  ConstraintCache cache(Bytes(), limits);
  const std::vector<ConstraintSpec> specs = {
      {ConstraintKind::kJsonObject, ""},
      {ConstraintKind::kRegex, "[a-c]{2,5}(x|yz)*"},
      {ConstraintKind::kJsonSchema, R"({"type": "array", "items": {"type": "integer"}})"}};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 30; ++i) {
        const ConstraintSpec& spec = specs[(t + i) % specs.size()];
        auto compiled = cache.Get(spec, "constraint");
        ASSERT_TRUE(compiled.ok()) << compiled.status();
        const std::string document = Sample(*compiled, rng, 400);
        if (!document.empty() && spec.kind != ConstraintKind::kRegex) {
          EXPECT_FALSE(nlohmann::json::parse(document, nullptr, false).is_discarded()) << document;
        }
        EXPECT_LE((*compiled)->cached_masks(), limits.max_cached_masks);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(CompiledConstraintTest, ErrorsNameTheField) {
  auto schema = CompileConstraint({ConstraintKind::kJsonSchema, R"({"type": "object", "foo": 1})"},
                                  Bytes(), {}, "constraint.json_schema");
  ASSERT_FALSE(schema.ok());
  EXPECT_THAT(std::string(schema.status().message()), ::testing::StartsWith("constraint.json_schema: "));
  auto regex = CompileConstraint({ConstraintKind::kRegex, "a(?=b)"}, Bytes(), {}, "constraint.regex");
  ASSERT_FALSE(regex.ok());
  EXPECT_THAT(std::string(regex.status().message()), ::testing::StartsWith("constraint.regex: "));
  auto object = CompileConstraint({ConstraintKind::kJsonObject, "x"}, Bytes(), {}, "c");
  EXPECT_THAT(object.status().message(), ::testing::HasSubstr("json_object takes no text"));
}

// A model without a tokenizer: no token stands for text, so nothing can be constrained.
TEST(CompiledConstraintTest, AVocabularyWithoutTextIsRefused) {
  auto vocabulary = TokenVocabulary::Create(NoTokenizer(300), 2);
  for (const ConstraintSpec& spec : {ConstraintSpec{ConstraintKind::kRegex, "a"},
                                     ConstraintSpec{ConstraintKind::kJsonObject, ""}}) {
    auto compiled = CompileConstraint(spec, vocabulary, {}, "constraint.regex");
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(compiled.status().message()),
                ::testing::AllOf(::testing::StartsWith("constraint.regex: "),
                                 ::testing::HasSubstr("without a tokenizer")));
  }
}

}  // namespace
}  // namespace linserve
