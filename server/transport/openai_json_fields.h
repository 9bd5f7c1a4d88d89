// Typed readers of the members of an OpenAI request's JSON body. Every error names the field
// first ("temperature: must be a number"), as ToApiError (openai_error.h) expects.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_JSON_FIELDS_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_JSON_FIELDS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace linserve {

// INVALID_ARGUMENT "<field>: <what>".
absl::Status InvalidField(absl::string_view field, absl::string_view what);
// The member `name` of `body`, nullptr when absent or null (OpenAI treats null as unset).
const nlohmann::json* JsonMember(const nlohmann::json& body, const char* name);
// The finite number `name`, nullopt when unset.
absl::StatusOr<std::optional<double>> JsonNumber(const nlohmann::json& body, const char* name);
// The integer `name` (within int64), nullopt when unset.
absl::StatusOr<std::optional<int64_t>> JsonInteger(const nlohmann::json& body, const char* name);
// An integer in [lo, hi], naming `limit` in the error; nullopt when unset.
absl::StatusOr<std::optional<int32_t>> JsonBoundedInteger(const nlohmann::json& body,
                                                          const char* name, int64_t lo,
                                                          int64_t hi, absl::string_view limit);
// true or false; false when unset.
absl::StatusOr<bool> JsonBool(const nlohmann::json& body, const char* name);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_JSON_FIELDS_H_
