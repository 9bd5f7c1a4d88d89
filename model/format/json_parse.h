// Strict JSON parsing for the untrusted files of a model directory (config.json, the
// model.safetensors header), and the nesting limit every JSON reader of linserve checks before it
// parses (the OpenAI API's request bodies too).
#ifndef LINSERVE_MODEL_FORMAT_JSON_PARSE_H_
#define LINSERVE_MODEL_FORMAT_JSON_PARSE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace linserve {

// Deepest nesting of arrays and objects accepted in a model's files, which need 4 levels (a layer's parameters in config.json).
inline constexpr int kMaxModelJsonDepth = 16;

// Where `text` first nests arrays and objects deeper than `max_depth`: the offset of the '[' or
// '{' that opens level max_depth + 1, or nullopt when none does. Brackets inside strings do not
// count; malformed JSON is left to the parser. A scan of the raw text, so that a limit checked
// before parsing keeps hostile input from making a parser build (and later destroy or print)
// millions of nested values.
std::optional<size_t> FindJsonNestingDeeperThan(std::string_view text, int max_depth);

// Parses `text` as one JSON object. Rejects nesting deeper than kMaxModelJsonDepth, syntax errors
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
