// Regular expression → GBNF: the output (the whole of it) matches the pattern.
#ifndef LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/constraints/constraint_spec.h"

namespace linserve {

// INVALID_ARGUMENT naming the byte offset of a syntax error or an unsupported construct
// (backreferences, lookaround), or the limit a pattern exceeds.
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern, const ConstraintLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_REGEX_GRAMMAR_H_
