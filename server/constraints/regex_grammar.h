// Regular expression → GBNF: the output (the whole of it) matches the pattern. The syntax (a
// subset of ECMAScript's and Python's, docs/server.md "Structured output") is: literals, escapes
// (\d \w \s \D \W \S, \n \t \r \f \v \0, \xHH, \uHHHH, a backslash before any
// punctuation), classes [...] with ranges, negation and escapes, `.` (any character but \n),
// groups ( ), (?: ), (?P<name> ) and (?<name> ) (all plain groups), alternation, the quantifiers
// * + ? {m} {m,} {m,n} and their lazy forms (the same language), ^ at the start and $ at the end
// (no effect). A `{` that does not start a quantifier is a literal, as in both.
#ifndef LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/constraints/constraint_spec.h"

namespace linserve {

// INVALID_ARGUMENT naming the byte offset of a syntax error or an unsupported construct
// (backreferences, lookaround), or the limit a pattern exceeds.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, const ConstraintLimits& limits);

// A pattern's rules for another grammar to use (JsonSchemaToGbnf's "pattern").
struct RegexRules {
  std::string text;      // GBNF rule definitions: `name` and the helper rules `name`-N
  int64_t elements = 0;  // their estimated elements (gbnf_builder.h)
};
// Errors as RegexToGbnf's, the grammar estimate bounded by `max_elements`.
// `json_string_content`: only characters a JSON string holds unescaped are generated (the
// pattern's other characters are dropped from classes; a literal one is an error).
absl::StatusOr<RegexRules> RegexToGbnfRules(std::string_view pattern,
                                            const ConstraintLimits& limits, std::string_view name,
                                            bool json_string_content, int64_t max_elements);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_
