#include "server/constraints/compiled_constraint.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/constraints/grammar.h"
#include "server/constraints/json_schema_grammar.h"
#include "server/constraints/parse_stacks.h"
#include "server/constraints/regex_grammar.h"

namespace linserve {
namespace {

absl::Status InField(absl::string_view field, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", status.message()));
}

absl::StatusOr<std::string> ToGbnf(const ConstraintSpec& spec, const ConstraintLimits& limits) {
  switch (spec.kind) {
    case ConstraintKind::kGrammar:
      return spec.text;
    case ConstraintKind::kJsonSchema:
      return JsonSchemaToGbnf(spec.text, limits);
    case ConstraintKind::kJsonObject:
      if (!spec.text.empty()) return absl::InvalidArgumentError("json_object takes no text");
      return JsonObjectGbnf(limits);
    case ConstraintKind::kRegex:
      return RegexToGbnf(spec.text, limits);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown constraint kind ", static_cast<int>(spec.kind)));
}

std::string CacheKey(const ConstraintSpec& spec) {
  return absl::StrCat(static_cast<int>(spec.kind), ":", spec.text);
}

}  // namespace

CompiledConstraint::~CompiledConstraint() = default;

const ConstraintSpec& CompiledConstraint::spec() const { return spec_; }
const std::string& CompiledConstraint::gbnf() const { return gbnf_; }
const Grammar& CompiledConstraint::grammar() const { return *grammar_; }
const TokenVocabulary& CompiledConstraint::vocabulary() const { return *vocabulary_; }
const ConstraintLimits& CompiledConstraint::limits() const { return limits_; }

int32_t CompiledConstraint::cached_masks() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int32_t>(masks_.size());
}

// A cached mask is the smallest of three forms, its first word saying which: the bits, the
// allowed token ids, or the refused ones (inside a JSON string nearly every token is allowed: a
// few hundred ids instead of GPT-2's 1571 words).
enum MaskForm : uint32_t { kBits = 0, kAllowedIds = 1, kRefusedIds = 2 };

bool CompiledConstraint::LookupMask(const std::string& key, absl::Span<uint32_t> mask) const {
  absl::MutexLock lock(&mutex_);
  const auto it = masks_.find(key);
  if (it == masks_.end()) return false;
  const std::vector<uint32_t>& stored = it->second;
  const auto payload = absl::MakeConstSpan(stored).subspan(1);
  switch (stored[0]) {
    case kBits:
      std::copy(payload.begin(), payload.end(), mask.begin());
      break;
    case kAllowedIds:
      std::fill(mask.begin(), mask.end(), 0u);
      for (uint32_t t : payload) mask[t / 32] |= uint32_t{1} << (t % 32);
      break;
    case kRefusedIds: {
      std::fill(mask.begin(), mask.end(), ~0u);
      const int32_t tail = vocabulary_->vocab_size() % 32;
      if (tail != 0) mask.back() = (uint32_t{1} << tail) - 1;
      for (uint32_t t : payload) mask[t / 32] &= ~(uint32_t{1} << (t % 32));
      break;
    }
  }
  return true;
}

void CompiledConstraint::StoreMask(const std::string& key, absl::Span<const uint32_t> mask) const {
  const int64_t vocab_size = vocabulary_->vocab_size();
  int64_t allowed = 0;
  for (uint32_t word : mask) allowed += __builtin_popcount(word);
  const int64_t refused = vocab_size - allowed;
  std::vector<uint32_t> stored;
  if (static_cast<int64_t>(mask.size()) <= std::min(allowed, refused)) {
    stored.reserve(mask.size() + 1);
    stored.push_back(kBits);
    stored.insert(stored.end(), mask.begin(), mask.end());
  } else {
    const bool list_allowed = allowed <= refused;
    stored.reserve(std::min(allowed, refused) + 1);
    stored.push_back(list_allowed ? kAllowedIds : kRefusedIds);
    for (size_t w = 0; w < mask.size(); ++w) {
      uint32_t bits = list_allowed ? mask[w] : ~mask[w];
      while (bits != 0) {
        const uint32_t t = static_cast<uint32_t>(w * 32 + __builtin_ctz(bits));
        if (t >= vocab_size) break;  // the last word's bits past the vocabulary
        stored.push_back(t);
        bits &= bits - 1;
      }
    }
  }
  absl::MutexLock lock(&mutex_);
  if (static_cast<int32_t>(masks_.size()) >= limits_.max_cached_masks) masks_.clear();
  masks_.try_emplace(key, std::move(stored));
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenVocabulary> vocabulary,
    const ConstraintLimits& limits, absl::string_view field) {
  if (auto status = ValidateConstraintLimits(limits); !status.ok()) return status;
  if (vocabulary->trie().size() == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": no token of this model stands for text (a model without a tokenizer: "
                     "config.json tokenizer \"none\"), so no text can be constrained"));
  }
  if (spec.text.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", spec.text.size(),
                                                   " bytes, above max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  auto gbnf = ToGbnf(spec, limits);
  if (!gbnf.ok()) return InField(field, gbnf.status());
  // max_text_bytes bounds what the request sent; GBNF compiled from a schema or a regex may be
  // longer, and is bounded by max_grammar_elements instead.
  ConstraintLimits parse_limits = limits;
  if (spec.kind != ConstraintKind::kGrammar) {
    parse_limits.max_text_bytes = std::numeric_limits<int32_t>::max();
  }
  auto grammar = ParseGbnf(*gbnf, parse_limits);
  if (!grammar.ok()) {
    // A grammar's own errors point into the request's text; those of a compiled schema or
    // regex into the GBNF made from it.
    if (spec.kind == ConstraintKind::kGrammar) return InField(field, grammar.status());
    return InField(field, absl::InvalidArgumentError(
                              absl::StrCat("its compiled grammar: ", grammar.status().message())));
  }
  std::shared_ptr<CompiledConstraint> compiled(new CompiledConstraint());
  compiled->spec_ = spec;
  compiled->gbnf_ = *std::move(gbnf);
  compiled->grammar_ = std::make_unique<const Grammar>(*std::move(grammar));
  auto start = std::make_unique<ParseStacks>();
  ParseStepper stepper(compiled->grammar_.get(), limits.max_matcher_stacks);
  if (auto status = stepper.Start(start.get()); !status.ok()) {
    return InField(field, absl::InvalidArgumentError(
                              absl::StrCat("at the start of a document: ", status.message())));
  }
  compiled->start_ = std::move(start);
  compiled->vocabulary_ = std::move(vocabulary);
  compiled->limits_ = limits;
  return compiled;
}

ConstraintCache::ConstraintCache(std::shared_ptr<const TokenVocabulary> vocabulary,
                                 const ConstraintLimits& limits)
    : vocabulary_(std::move(vocabulary)), limits_(limits) {}

const TokenVocabulary& ConstraintCache::vocabulary() const { return *vocabulary_; }
const ConstraintLimits& ConstraintCache::limits() const { return limits_; }

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> ConstraintCache::Get(
    const ConstraintSpec& spec, absl::string_view field) {
  const std::string key = CacheKey(spec);
  {
    absl::MutexLock lock(&mutex_);
    const auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Compiled without the lock: other specs are served meanwhile. Two threads missing the same
  // spec both compile it; the first to finish is kept.
  auto compiled = CompileConstraint(spec, vocabulary_, limits_, field);
  if (!compiled.ok()) return compiled.status();
  absl::MutexLock lock(&mutex_);
  const auto it = entries_.find(key);
  if (it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  lru_.emplace_front(key, *compiled);
  entries_.emplace(key, lru_.begin());
  while (static_cast<int32_t>(lru_.size()) > limits_.cache_entries) {
    entries_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *compiled;
}

}  // namespace linserve
