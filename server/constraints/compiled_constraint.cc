#include "server/constraints/compiled_constraint.h"

#include <algorithm>
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

bool CompiledConstraint::LookupMask(const std::string& key, absl::Span<uint32_t> mask) const {
  absl::MutexLock lock(&mutex_);
  const auto it = masks_.find(key);
  if (it == masks_.end()) return false;
  std::copy(it->second.begin(), it->second.end(), mask.begin());
  return true;
}

void CompiledConstraint::StoreMask(const std::string& key, absl::Span<const uint32_t> mask) const {
  absl::MutexLock lock(&mutex_);
  if (static_cast<int32_t>(masks_.size()) >= limits_.max_cached_masks) masks_.clear();
  masks_.try_emplace(key, mask.begin(), mask.end());
}

absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenVocabulary> vocabulary,
    const ConstraintLimits& limits, absl::string_view field) {
  if (auto status = ValidateConstraintLimits(limits); !status.ok()) return status;
  if (spec.text.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", spec.text.size(),
                                                   " bytes, above max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  auto gbnf = ToGbnf(spec, limits);
  if (!gbnf.ok()) return InField(field, gbnf.status());
  auto grammar = ParseGbnf(*gbnf, limits);
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
