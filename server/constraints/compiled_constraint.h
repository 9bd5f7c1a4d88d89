// CompiledConstraint: a ConstraintSpec compiled for one model's vocabulary — its byte-level
// grammar and the token masks computed so far, keyed by matcher state — and ConstraintCache, the
// server's compiled constraints by spec, so that a schema sent with every request compiles once.
//
// Compiling runs on the caller's thread (the transport's, before Engine::Submit) at a cost
// bounded by ConstraintLimits; masks are computed on the engine thread (GrammarMatcher::FillMask).
#ifndef LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_
#define LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/constraints/constraint_spec.h"
#include "server/constraints/token_vocabulary.h"

namespace linserve {

class Grammar;      // grammar.h
class ParseStacks;  // parse_stacks.h

// Thread-safe: immutable but for its mask cache, which locks.
class CompiledConstraint {
 public:
  const ConstraintSpec& spec() const;
  // The GBNF text the spec compiled to (the spec's own text for kGrammar).
  const std::string& gbnf() const;
  const Grammar& grammar() const;
  const TokenVocabulary& vocabulary() const;
  const ConstraintLimits& limits() const;
  // Token masks held in the mask cache now (at most limits().max_cached_masks).
  int32_t cached_masks() const;

  ~CompiledConstraint();

 private:
  friend class GrammarMatcher;
  friend absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(
      const ConstraintSpec&, std::shared_ptr<const TokenVocabulary>, const ConstraintLimits&,
      absl::string_view);

  CompiledConstraint() = default;
  // The cached mask of the stack set whose ParseStacks::AppendKey is `key`, written to `mask`.
  bool LookupMask(const std::string& key, absl::Span<uint32_t> mask) const;
  // Keeps the mask in its smallest form (bits, allowed ids or refused ids). When the cache is
  // full it is emptied first (masks of a document's recurring states come back at once).
  void StoreMask(const std::string& key, absl::Span<const uint32_t> mask) const;

  ConstraintSpec spec_;
  std::string gbnf_;
  std::unique_ptr<const Grammar> grammar_;
  std::unique_ptr<const ParseStacks> start_;  // the stacks at the start of a document
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  ConstraintLimits limits_;
  mutable absl::Mutex mutex_;
  mutable absl::flat_hash_map<std::string, std::vector<uint32_t>> masks_ ABSL_GUARDED_BY(mutex_);
};

// Compiles `spec` for `vocabulary` within `limits`. Errors are INVALID_ARGUMENT and begin with
// `field` (the request field that carried the spec, e.g. "constraint.json_schema"), then say
// what is wrong and where: an unsupported schema keyword by name and JSON pointer, a regex or
// grammar syntax error by byte offset, a limit by its name and value, a vocabulary with no token
// that stands for text (a model without a tokenizer).
absl::StatusOr<std::shared_ptr<const CompiledConstraint>> CompileConstraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenVocabulary> vocabulary,
    const ConstraintLimits& limits, absl::string_view field);

// Thread-safe. Keeps the limits.cache_entries most recently used compiled constraints.
class ConstraintCache {
 public:
  ConstraintCache(std::shared_ptr<const TokenVocabulary> vocabulary,
                  const ConstraintLimits& limits);
  // The compiled `spec`, compiling it on a miss (errors as CompileConstraint; failures are not
  // cached).
  absl::StatusOr<std::shared_ptr<const CompiledConstraint>> Get(const ConstraintSpec& spec,
                                                                absl::string_view field);
  const TokenVocabulary& vocabulary() const;
  const ConstraintLimits& limits() const;

 private:
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  const ConstraintLimits limits_;
  absl::Mutex mutex_;
  // Most recently used first; entries_ indexes it by spec (kind byte + text).
  std::list<std::pair<std::string, std::shared_ptr<const CompiledConstraint>>> lru_
      ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_map<std::string, decltype(lru_)::iterator> entries_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_
