// Documents fed to a compiled constraint byte by byte (ByteTokenizer: one token a byte, eos
// 256): whole-document checks and random documents the masks allow.
#ifndef LINSERVE_TESTS_SERVER_CONSTRAINTS_BYTE_DOCUMENTS_H_
#define LINSERVE_TESTS_SERVER_CONSTRAINTS_BYTE_DOCUMENTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"
#include "model/tokenizer/byte_tokenizer.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/grammar_matcher.h"
#include "server/constraints/token_vocabulary.h"

namespace linserve {

inline constexpr TokenId kByteDocumentEos = 256;

inline std::shared_ptr<const CompiledConstraint> CompileForBytes(
    const ConstraintSpec& spec, const ConstraintLimits& limits = {}) {
  static const auto vocabulary = TokenVocabulary::Create(ByteTokenizer(257), kByteDocumentEos);
  auto compiled = CompileConstraint(spec, vocabulary, limits, "constraint");
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() ? *compiled : nullptr;
}

// Whether `document`, fed byte by byte, is a whole document of `constraint`.
inline bool Accepts(const std::shared_ptr<const CompiledConstraint>& constraint,
                    std::string_view document) {
  GrammarMatcher matcher(constraint);
  for (char c : document) {
    if (!matcher.Accept(static_cast<uint8_t>(c)).ok()) return false;
  }
  return matcher.CanEnd();
}

// A document drawn byte by byte from what the masks allow: printable ASCII where the mask has
// some, eos with probability 1/2 where allowed. nullopt when it is not over within `max_bytes`.
inline std::optional<std::string> RandomDocument(
    const std::shared_ptr<const CompiledConstraint>& constraint, std::mt19937& rng,
    int max_bytes) {
  GrammarMatcher matcher(constraint);
  std::vector<uint32_t> mask(constraint->vocabulary().mask_words());
  std::string document;
  for (int step = 0; step <= max_bytes; ++step) {
    if (matcher.IsComplete()) return document;
    EXPECT_TRUE(matcher.FillMask(absl::MakeSpan(mask)).ok());
    const auto allowed = [&](TokenId t) { return (mask[t / 32] >> (t % 32)) & 1; };
    if (allowed(kByteDocumentEos) && rng() % 2 == 0) return document;
    std::vector<TokenId> printable, any;
    for (TokenId t = 0; t < kByteDocumentEos; ++t) {
      if (!allowed(t)) continue;
      any.push_back(t);
      if (t >= 0x20 && t < 0x7F) printable.push_back(t);
    }
    const std::vector<TokenId>& pick = printable.empty() ? any : printable;
    if (pick.empty()) return allowed(kByteDocumentEos) ? std::optional(document) : std::nullopt;
    const TokenId t = pick[rng() % pick.size()];
    EXPECT_TRUE(matcher.Accept(t).ok());
    document += static_cast<char>(t);
  }
  return std::nullopt;
}

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_CONSTRAINTS_BYTE_DOCUMENTS_H_
