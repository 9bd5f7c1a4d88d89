// JSON schema → GBNF (the subset of JSON Schema the OpenAI API documents for structured outputs),
// and the grammar of json_object. The GBNF is what ParseGbnf (grammar.h) reads.
#ifndef LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/constraints/constraint_spec.h"

namespace linserve {

// INVALID_ARGUMENT for text that is not a JSON schema, a keyword outside the subset (named, with
// its JSON pointer), or a schema beyond `limits` (nesting, size).
absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema,
                                             const ConstraintLimits& limits);
// A JSON object whose values are any JSON values, nested at most limits.max_nesting_depth deep.
std::string JsonObjectGbnf(const ConstraintLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_GRAMMAR_H_
