// linserve-loadtest's --constraint: the structured-output constraint sent with every request.
#ifndef LINSERVE_CLIENT_LOADTEST_CONSTRAINT_OPTION_H_
#define LINSERVE_CLIENT_LOADTEST_CONSTRAINT_OPTION_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "linserve/v1/generate.pb.h"

namespace linserve::loadtest {

// "json_object", "json_schema:FILE", "regex:PATTERN" or "grammar:FILE" (files read whole).
// INVALID_ARGUMENT naming --constraint for another form or an unreadable file.
absl::StatusOr<v1::Constraint> ParseConstraintOption(absl::string_view value);

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_CONSTRAINT_OPTION_H_
