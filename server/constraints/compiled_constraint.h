// CompiledConstraint: a ConstraintSpec compiled for one model's vocabulary — its byte-level
// grammar and the token masks computed so far, keyed by matcher state — and ConstraintCache, the
// server's compiled constraints by spec, so that a schema sent with every request compiles once.
//
// Compiling runs on the caller's thread (the transport's, before Engine::Submit) at a cost
// bounded by ConstraintLimits; masks are computed on the engine thread (GrammarMatcher::FillMask).
#ifndef LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_
#define LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/constraints/constraint_spec.h"
#include "server/constraints/token_vocabulary.h"

namespace linserve {

class Grammar;  // grammar.h

// Thread-safe: immutable but for its mask cache, which locks.
class CompiledConstraint {
 public:
  const ConstraintSpec& spec() const;
  // The GBNF text the spec compiled to (the spec's own text for kGrammar).
  const std::string& gbnf() const;
  const Grammar& grammar() const;
  const TokenVocabulary& vocabulary() const;
  const ConstraintLimits& limits() const;
};

// Compiles `spec` for `vocabulary` within `limits`. Errors are INVALID_ARGUMENT and begin with
// `field` (the request field that carried the spec, e.g. "constraint.json_schema"), then say
// what is wrong and where: an unsupported schema keyword by name and JSON pointer, a regex or
// grammar syntax error by byte offset, a limit by its name and value.
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
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_COMPILED_CONSTRAINT_H_
