// ConstraintSpec: what a client asked the output to obey (structured output), as text, before
// compilation; ConstraintState: a constrained document's position as a session keeps it;
// ConstraintLimits: the bounds on what compiling and matching a constraint may cost.
// docs/architecture.md §2.4 says how the parts fit.
#ifndef LINSERVE_SERVER_CONSTRAINTS_CONSTRAINT_SPEC_H_
#define LINSERVE_SERVER_CONSTRAINTS_CONSTRAINT_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace linserve {

// The wire values (snapshot format, §3.3.1) are fixed: never renumber.
enum class ConstraintKind : uint8_t {
  kJsonSchema = 1,  // text: a JSON schema (the subset docs/server.md lists)
  kJsonObject = 2,  // text: empty; the output is a JSON object
  kRegex = 3,       // text: a regular expression the whole output matches
  kGrammar = 4,     // text: a GBNF grammar (llama.cpp's syntax) whose `root` the output is
};

// "json_schema", "json_object", "regex", "grammar": the proto oneof's field names.
std::string_view ToString(ConstraintKind kind);

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;
  friend bool operator==(const ConstraintSpec&, const ConstraintSpec&) = default;
};

// A session's constrained document: the constraint and where its matcher stands
// (GrammarMatcher::Serialize). Held by a session between requests, in its turn boundaries and
// in its snapshot.
struct ConstraintState {
  ConstraintSpec spec;
  std::string matcher;
  friend bool operator==(const ConstraintState&, const ConstraintState&) = default;
};

struct ConstraintLimits {
  // Bytes of a constraint's text (schema, pattern, grammar). Default: 65536.
  int32_t max_text_bytes = 65536;
  // Elements of the compiled byte-level grammar (terminals and rule references, after every
  // repetition is expanded and every character class is spelled out as UTF-8 byte ranges).
  // Default: 262144.
  int32_t max_grammar_elements = 262144;
  // Nesting depth of a JSON schema, of a regex's groups and of a grammar's parentheses.
  // Default: 64.
  int32_t max_nesting_depth = 64;
  // Parse stacks a matcher may hold at once (the live alternatives of an ambiguous grammar); a
  // request whose document needs more fails with RESOURCE_EXHAUSTED. Default: 1024.
  int32_t max_matcher_stacks = 1024;
  // Compiled constraints the server keeps for reuse (with their mask caches). Default: 64.
  int32_t cache_entries = 64;
  // Token masks each compiled constraint keeps, keyed by matcher state. Default: 4096.
  int32_t max_cached_masks = 4096;
};

// Errors are INVALID_ARGUMENT naming the field of ConstraintLimits and its range.
absl::Status ValidateConstraintLimits(const ConstraintLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_CONSTRAINT_SPEC_H_
