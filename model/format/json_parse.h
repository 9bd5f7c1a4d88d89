// Strict JSON parsing for the untrusted files of a model directory (config.json, the
// model.safetensors header). Internal to linserve_model_format.
#ifndef LINSERVE_MODEL_FORMAT_JSON_PARSE_H_
#define LINSERVE_MODEL_FORMAT_JSON_PARSE_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace linserve {

// Deepest nesting of arrays and objects accepted. Our files need 4 levels; the limit is checked
// before parsing so that hostile input cannot make the parser build (and later destroy or print)
// millions of nested values.
inline constexpr int kMaxJsonDepth = 16;

// Parses `text` as one JSON object. Rejects nesting deeper than kMaxJsonDepth, syntax errors
// (with the byte position), a top level that is not an object, and duplicate keys in any object
// (nlohmann would silently keep the last one, letting a file say two things at once). Errors are
// INVALID_ARGUMENT and begin with `source`.
absl::StatusOr<nlohmann::json> ParseStrictJsonObject(std::string_view text,
                                                     std::string_view source);

// "object", "array", "string", "integer", "number", "boolean" or "null": names a JSON value's
// type in error messages.
const char* JsonTypeName(const nlohmann::json& value);

// `value` for an error message: its type, then its JSON text when it is a scalar, cut to 64
// bytes ("integer 3", "string \"pre\"", "array"). Containers are named by type only.
std::string DescribeJson(const nlohmann::json& value);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_JSON_PARSE_H_
