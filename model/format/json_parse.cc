#include "model/format/json_parse.h"

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace linserve {

std::optional<size_t> FindJsonNestingDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

absl::StatusOr<nlohmann::json> ParseStrictJsonObject(std::string_view text,
                                                     std::string_view source_view) {
  // Debian's Abseil has its own absl::string_view, which std::string_view does not convert to.
  const std::string source(source_view);
  if (const std::optional<size_t> at = FindJsonNestingDeeperThan(text, kMaxModelJsonDepth)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": JSON nested deeper than ",
                                                   kMaxModelJsonDepth, " levels (at byte ", *at,
                                                   ")"));
  }
  // The parser callback sees every key as it is read; one set of keys per open object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    switch (event) {
      case nlohmann::json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case nlohmann::json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case nlohmann::json::parse_event_t::key:
        if (!open_objects.empty() && duplicate.empty() &&
            !open_objects.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": duplicate key \"", duplicate, "\""));
  }
  if (!value.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": the top level must be a JSON object, got ", JsonTypeName(value)));
  }
  return value;
}

const char* JsonTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object:
      return "object";
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::string:
      return "string";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer";
    case nlohmann::json::value_t::number_float:
      return "number";
    case nlohmann::json::value_t::boolean:
      return "boolean";
    case nlohmann::json::value_t::null:
      return "null";
    default:
      return "invalid value";
  }
}

std::string DescribeJson(const nlohmann::json& value) {
  if (value.is_structured()) return JsonTypeName(value);
  if (value.is_null()) return "null";
  constexpr size_t kMaxText = 64;
  std::string text = value.dump();
  if (text.size() > kMaxText) {
    text.resize(kMaxText);
    text += "...";
  }
  return absl::StrCat(JsonTypeName(value), " ", text);
}

}  // namespace linserve
