#include "server/constraints/json_schema_compiler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/constraints/json_value_grammar.h"

namespace linserve {
namespace {

using Json = JsonSchemaCompiler::Json;

// Counts (minItems, maxLength, ...) past this are refused as such (the grammar limit refuses far
// less).
constexpr int64_t kMaxCount = 1'000'000'000;

// A reference token of a JSON pointer, its ~0 and ~1 escapes undone.
std::string UnescapePointerToken(absl::string_view token) {
  std::string unescaped;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      unescaped += token[++i] == '0' ? '~' : '/';
    } else {
      unescaped += token[i];
    }
  }
  return unescaped;
}

std::string Where(absl::string_view pointer) {
  return pointer.empty() ? std::string("the root") : std::string(pointer);
}

// Keywords with no effect on the output.
bool IsAnnotation(absl::string_view keyword) {
  static constexpr absl::string_view kAnnotations[] = {
      "title", "description", "$schema", "$id", "default", "examples", "$comment", "strict"};
  return std::find(std::begin(kAnnotations), std::end(kAnnotations), keyword) !=
         std::end(kAnnotations);
}

bool IsSupported(absl::string_view keyword) {
  static constexpr absl::string_view kKeywords[] = {
      "type",     "properties", "required",  "additionalProperties", "items", "minItems",
      "maxItems", "enum",       "const",     "pattern",              "minLength", "maxLength",
      "anyOf",    "$ref",       "$defs",     "definitions", "minimum", "maximum",
      "exclusiveMinimum", "exclusiveMaximum"};
  return IsAnnotation(keyword) ||
         std::find(std::begin(kKeywords), std::end(kKeywords), keyword) != std::end(kKeywords);
}

constexpr absl::string_view kTypes[] = {"string", "number",  "integer", "boolean",
                                       "null",   "object",  "array"};

// Whether `value` is an instance of JSON type `type`.
bool HasType(const Json& value, absl::string_view type) {
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "null") return value.is_null();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    const double d = value.get<double>();
    return std::isfinite(d) && d == std::trunc(d);
  }
  return false;
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaCompiler::Compile() {
  ref_rules_[""] = "root";
  unguarded_.insert("");
  absl::StatusOr<GbnfExpr> root = Visit(root_, "", 1);
  if (!root.ok()) return root.status();
  if (absl::Status status = rules_.Check(root->elements); !status.ok()) return status;
  return absl::StrCat("root ::= ", root->text, "\n", rules_.text());
}

absl::Status JsonSchemaCompiler::Error(absl::string_view pointer,
                                       absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(what, " at ", Where(pointer)));
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Fixed(absl::string_view name) {
  if (absl::Status status = UseJsonFixedRule(name, &used_fixed_, &rules_); !status.ok()) {
    return status;
  }
  return GbnfRef(name);
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::NewRule(absl::string_view kind,
                                                     const GbnfExpr& body) {
  const std::string name = absl::StrCat(kind, "-", ++rule_count_);
  if (absl::Status status = rules_.Add(name, body); !status.ok()) return status;
  return GbnfRef(name);
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::AnyValue() {
  if (!any_value_) {
    if (absl::Status status = UseJsonAnyValueDependencies(&used_fixed_, &rules_); !status.ok()) {
      return status;
    }
    const int depth = limits_.max_nesting_depth;
    if (absl::Status status = rules_.AddText(
            JsonAnyValueRules(depth, /*with_value_1=*/true),
            SaturatingMul(kJsonAnyValueElementsPerLevel, depth));
        !status.ok()) {
      return status;
    }
    any_value_ = true;
  }
  return GbnfRef("value-1");
}

absl::StatusOr<std::optional<int64_t>> JsonSchemaCompiler::Count(const Json& schema,
                                                                 absl::string_view keyword,
                                                                 absl::string_view pointer) {
  const auto it = schema.find(std::string(keyword));
  if (it == schema.end()) return std::nullopt;
  const std::string where = absl::StrCat(pointer, "/", keyword);
  if (!HasType(*it, "integer") || it->get<double>() < 0) {
    return Error(where, absl::StrCat(keyword, " must be a non-negative integer"));
  }
  if (it->get<double>() > static_cast<double>(kMaxCount)) {
    return Error(where, absl::StrCat(keyword, " over ", kMaxCount));
  }
  return it->get<int64_t>();
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Visit(const Json& schema, const std::string& pointer,
                                                   int depth) {
  if (depth > limits_.max_nesting_depth) {
    return Error(pointer, absl::StrCat("schema nested deeper than max_nesting_depth (",
                                       limits_.max_nesting_depth, ")"));
  }
  if (schema.is_boolean()) {
    if (schema.get<bool>()) return AnyValue();
    return Error(pointer, "schema false (no value is valid)");
  }
  if (!schema.is_object()) return Error(pointer, "a schema must be an object or a boolean");
  for (const auto& [keyword, value] : schema.items()) {
    if (!IsSupported(keyword)) {
      return Error(pointer, absl::StrCat("unsupported keyword \"", keyword, "\""));
    }
  }
  for (absl::string_view defs : {"$defs", "definitions"}) {
    if (schema.contains(std::string(defs)) && !schema[std::string(defs)].is_object()) {
      return Error(absl::StrCat(pointer, "/", defs), absl::StrCat(defs, " must be an object"));
    }
  }
  // Keywords that stand alone (but for annotations and definitions).
  for (absl::string_view alone : {"$ref", "anyOf", "enum", "const"}) {
    if (!schema.contains(std::string(alone))) continue;
    for (const auto& [keyword, value] : schema.items()) {
      if (keyword == alone || IsAnnotation(keyword) || keyword == "$defs" ||
          keyword == "definitions" ||
          ((alone == "enum" || alone == "const") && keyword == "type")) {
        continue;
      }
      return Error(pointer, absl::StrCat("keyword \"", keyword, "\" beside \"", alone,
                                         "\" is not supported"));
    }
  }
  if (schema.contains("$ref")) return Ref(schema["$ref"], pointer, depth);
  if (schema.contains("anyOf")) return AnyOf(schema["anyOf"], pointer, depth);

  std::vector<std::string> types;
  if (schema.contains("type")) {
    const Json& type = schema["type"];
    const std::string where = absl::StrCat(pointer, "/type");
    if (type.is_string()) {
      types.push_back(type.get<std::string>());
    } else if (type.is_array() && !type.empty()) {
      for (const Json& t : type) {
        if (!t.is_string()) return Error(where, "type must be a string or strings");
        types.push_back(t.get<std::string>());
      }
    } else {
      return Error(where, "type must be a string or a non-empty array of strings");
    }
    for (const std::string& t : types) {
      if (std::find(std::begin(kTypes), std::end(kTypes), t) == std::end(kTypes)) {
        return Error(where, absl::StrCat("unknown type \"", t, "\""));
      }
    }
  }
  if (schema.contains("enum") || schema.contains("const")) {
    return Enum(schema, types, pointer);
  }
  // Bounds constrain integers only here (a fractional number's interval is not built).
  if (HasBounds(schema) && (std::find(types.begin(), types.end(), "integer") == types.end() ||
                            std::find(types.begin(), types.end(), "number") != types.end())) {
    return Error(pointer, "minimum/maximum are supported on type \"integer\" only");
  }
  if (types.empty()) {
    const auto has_any = [&](std::initializer_list<absl::string_view> keywords) {
      for (absl::string_view k : keywords) {
        if (schema.contains(std::string(k))) return true;
      }
      return false;
    };
    if (has_any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (has_any({"items", "minItems", "maxItems"})) types.push_back("array");
    if (has_any({"pattern", "minLength", "maxLength"})) types.push_back("string");
    if (types.empty()) return AnyValue();
  }
  std::vector<GbnfExpr> alternatives;
  absl::flat_hash_set<std::string> seen;
  for (const std::string& type : types) {
    if (!seen.insert(type).second) continue;
    absl::StatusOr<GbnfExpr> alternative;
    if (type == "string") {
      alternative = String(schema, pointer);
    } else if (type == "object") {
      alternative = Object(schema, pointer, depth);
    } else if (type == "array") {
      alternative = Array(schema, pointer, depth);
    } else if (type == "integer" && HasBounds(schema)) {
      alternative = BoundedInteger(schema, pointer);
    } else {
      alternative = Fixed(type);
    }
    if (!alternative.ok()) return alternative.status();
    alternatives.push_back(*std::move(alternative));
  }
  return GbnfAlt(alternatives);
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::VisitInside(const Json& schema,
                                                         const std::string& pointer, int depth) {
  absl::flat_hash_set<std::string> outer;
  std::swap(outer, unguarded_);
  absl::StatusOr<GbnfExpr> expr = Visit(schema, pointer, depth);
  std::swap(outer, unguarded_);
  return expr;
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Ref(const Json& ref, const std::string& pointer,
                                                 int depth) {
  const std::string where = absl::StrCat(pointer, "/$ref");
  if (!ref.is_string()) return Error(where, "$ref must be a string");
  const std::string text = ref.get<std::string>();
  if (text != "#" && !absl::StartsWith(text, "#/")) {
    return Error(where, absl::StrCat("$ref \"", text,
                                     "\" is not supported (only references into this "
                                     "schema: #, #/$defs/..., #/definitions/...)"));
  }
  const std::string target_pointer = text.substr(1);
  const Json* target = &root_;
  std::string name = "def";
  if (!target_pointer.empty()) {
    for (absl::string_view piece : absl::StrSplit(target_pointer.substr(1), '/')) {
      const std::string token = UnescapePointerToken(piece);
      size_t index = 0;
      if (target->is_object() && target->contains(token)) {
        target = &(*target)[token];
      } else if (target->is_array() && absl::SimpleAtoi(token, &index) &&
                 index < target->size()) {
        target = &(*target)[index];
      } else {
        return Error(where, absl::StrCat("$ref \"", text, "\" names nothing"));
      }
      name = "def-";
      for (char c : token) name += absl::ascii_isalnum(static_cast<unsigned char>(c)) ? c : '-';
    }
  }
  if (unguarded_.contains(target_pointer)) {
    return Error(where, absl::StrCat("$ref \"", text,
                                     "\" refers to itself with no object or array between "
                                     "(left recursion)"));
  }
  if (const auto it = ref_rules_.find(target_pointer); it != ref_rules_.end()) {
    return GbnfRef(it->second);
  }
  name = absl::StrCat(name, "-", ++rule_count_);
  ref_rules_[target_pointer] = name;
  unguarded_.insert(target_pointer);
  absl::StatusOr<GbnfExpr> body = Visit(*target, target_pointer, depth + 1);
  unguarded_.erase(target_pointer);
  if (!body.ok()) return body.status();
  if (absl::Status status = rules_.Add(name, *body); !status.ok()) return status;
  return GbnfRef(name);
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::AnyOf(const Json& any_of, const std::string& pointer,
                                                   int depth) {
  const std::string where = absl::StrCat(pointer, "/anyOf");
  if (!any_of.is_array() || any_of.empty()) {
    return Error(where, "anyOf must be a non-empty array of schemas");
  }
  std::vector<GbnfExpr> alternatives;
  for (size_t i = 0; i < any_of.size(); ++i) {
    absl::StatusOr<GbnfExpr> alternative =
        Visit(any_of[i], absl::StrCat(where, "/", i), depth + 1);
    if (!alternative.ok()) return alternative.status();
    alternatives.push_back(*std::move(alternative));
  }
  if (alternatives.size() == 1) return alternatives[0];
  return NewRule("alt", GbnfAlt(alternatives));
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Enum(const Json& schema,
                                                  const std::vector<std::string>& types,
                                                  const std::string& pointer) {
  if (schema.contains("enum") && schema.contains("const")) {
    return Error(pointer, "keyword \"const\" beside \"enum\" is not supported");
  }
  Json values;
  std::string where;
  if (schema.contains("const")) {
    values = Json::array({schema["const"]});
    where = absl::StrCat(pointer, "/const");
  } else {
    values = schema["enum"];
    where = absl::StrCat(pointer, "/enum");
    if (!values.is_array() || values.empty()) return Error(where, "enum must be a non-empty array");
  }
  std::vector<GbnfExpr> alternatives;
  absl::flat_hash_set<std::string> seen;
  for (const Json& value : values) {
    const bool typed = types.empty() || std::any_of(types.begin(), types.end(),
                                                    [&](const std::string& type) {
                                                      return HasType(value, type);
                                                    });
    std::string text = value.dump();
    if (!typed || !seen.insert(text).second) continue;
    alternatives.push_back(GbnfLiteral(text));
  }
  if (alternatives.empty()) return Error(where, "no value is of the schema's type");
  if (alternatives.size() == 1) return alternatives[0];
  return NewRule("enum", GbnfAlt(alternatives));
}

}  // namespace linserve
