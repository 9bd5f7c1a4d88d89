#include "server/constraints/json_schema_grammar.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/constraints/json_schema_compiler.h"
#include "server/constraints/json_value_grammar.h"

namespace linserve {

absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema,
                                             const ConstraintLimits& limits) {
  if (schema.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("schema of ", schema.size(),
                                                   " bytes exceeds max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  // The JSON nests at most two levels per schema level ("properties": {"name": {...}}), so
  // deeper text is refused while parsing, before anything walks it recursively.
  const int max_json_depth = 2 * limits.max_nesting_depth + 2;
  bool too_deep = false;
  using Json = JsonSchemaCompiler::Json;
  Json parsed;
  try {
    parsed = Json::parse(schema.begin(), schema.end(),
                         [&](int depth, Json::parse_event_t event, Json&) {
                           if ((event == Json::parse_event_t::object_start ||
                                event == Json::parse_event_t::array_start) &&
                               depth >= max_json_depth) {
                             too_deep = true;
                           }
                           return !too_deep;
                         });
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("schema is not JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schema nested deeper than max_nesting_depth (", limits.max_nesting_depth, ")"));
  }
  return JsonSchemaCompiler(parsed, limits).Compile();
}

std::string JsonObjectGbnf(const ConstraintLimits& limits) {
  std::string text = "root ::= object-1\n";
  for (const JsonFixedRule& rule : JsonFixedRules()) {
    if (rule.name == "integer") continue;  // numbers only
    absl::StrAppend(&text, rule.name, " ::= ", rule.body, "\n");
  }
  text += JsonAnyValueRules(limits.max_nesting_depth, /*with_value_1=*/false);
  return text;
}

}  // namespace linserve
