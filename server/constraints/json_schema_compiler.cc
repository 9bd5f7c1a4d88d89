#include "server/constraints/json_schema_grammar.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/constraints/gbnf_builder.h"
#include "server/constraints/integer_range_grammar.h"
#include "server/constraints/regex_grammar.h"

namespace linserve {
namespace {

using Json = nlohmann::ordered_json;

// Counts (minItems, maxLength, ...) past this are refused as such (the grammar limit refuses far
// less).
constexpr int64_t kMaxCount = 1'000'000'000;

// The rules every JSON grammar here may use, each with what it refers to and its estimate.
// Whitespace is llama.cpp's: nothing, one space, or a newline and up to 20 spaces or tabs.
// A \u escape is 4 hex digits naming a character: a high surrogate only with its low one.
// Numbers have at most 16 digits before the point and after it (as llama.cpp's) and an exponent
// of at most 2 digits, so every one is a finite double.
struct FixedRule {
  absl::string_view name;
  absl::string_view body;
  std::vector<absl::string_view> uses;
  int64_t elements;
};
const std::vector<FixedRule>& FixedRules() {
  static const auto* rules = new std::vector<FixedRule>{
      {"space", R"((" " | "\n" [ \t]{0,20})?)", {}, 45},
      {"char",
       R"([^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2})))",
       {},
       90},
      {"string", R"("\"" char* "\"")", {"char"}, 6},
      {"integral-part", R"("0" | [1-9] [0-9]{0,15})", {}, 35},
      {"integer", R"("-"? integral-part)", {"integral-part"}, 4},
      {"number", R"("-"? integral-part ("." [0-9]{1,16})? ([eE] [-+]? ("0" | [1-9] [0-9]?))?)",
       {"integral-part"},
       45},
      {"boolean", R"("true" | "false")", {}, 9},
      {"null", R"("null")", {}, 4},
  };
  return *rules;
}

// Any JSON value, its objects and arrays nested at most `depth` deep: the rules value-d,
// object-d, member-d, array-d for d = 1..depth (a container at level d holds values of level
// d + 1), and scalar (no container) past the last level. `with_value_1`: also value-1 and array-1
// (json_object's root is object-1 alone).
std::string AnyValueRules(int depth, bool with_value_1) {
  std::string text;
  for (int d = 1; d <= depth; ++d) {
    const std::string inner = d == depth ? "scalar" : absl::StrCat("value-", d + 1);
    if (d > 1 || with_value_1) {
      absl::StrAppend(&text, "value-", d, " ::= object-", d, " | array-", d,
                      " | string | number | boolean | null\n");
      absl::StrAppend(&text, "array-", d, " ::= \"[\" space (", inner, " (space \",\" space ",
                      inner, ")* space)? \"]\"\n");
    }
    absl::StrAppend(&text, "object-", d, " ::= \"{\" space (member-", d,
                    " (space \",\" space member-", d, ")* space)? \"}\"\n");
    absl::StrAppend(&text, "member-", d, " ::= string space \":\" space ", inner, "\n");
  }
  text += "scalar ::= string | number | boolean | null\n";
  return text;
}
constexpr int64_t kAnyValueElementsPerLevel = 40;

// Adds fixed rule `name` and those it uses to `rules`, once.
absl::Status UseFixed(absl::string_view name, absl::flat_hash_set<std::string>* used,
                      GbnfRules* rules) {
  if (!used->insert(std::string(name)).second) return absl::OkStatus();
  for (const FixedRule& rule : FixedRules()) {
    if (rule.name != name) continue;
    for (absl::string_view dependency : rule.uses) {
      if (absl::Status status = UseFixed(dependency, used, rules); !status.ok()) return status;
    }
    return rules->AddText(absl::StrCat(rule.name, " ::= ", rule.body, "\n"), rule.elements);
  }
  return absl::OkStatus();
}

// The fixed rules any-value uses.
absl::Status UseAnyValueDependencies(absl::flat_hash_set<std::string>* used, GbnfRules* rules) {
  for (absl::string_view name : {"space", "string", "number", "boolean", "null"}) {
    if (absl::Status status = UseFixed(name, used, rules); !status.ok()) return status;
  }
  return absl::OkStatus();
}

// JSON pointer syntax for one reference token.
std::string EscapePointerToken(absl::string_view token) {
  std::string escaped;
  for (char c : token) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

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

// The bounds an integer may have (BoundedInteger).
constexpr const char* kBoundKeywords[] = {"minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum"};

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

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const ConstraintLimits& limits)
      : root_(root), limits_(limits), rules_(limits.max_grammar_elements) {}

  absl::StatusOr<std::string> Compile() {
    ref_rules_[""] = "root";
    unguarded_.insert("");
    absl::StatusOr<GbnfExpr> root = Visit(root_, "", 1);
    if (!root.ok()) return root.status();
    if (absl::Status status = rules_.Check(root->elements); !status.ok()) return status;
    return absl::StrCat("root ::= ", root->text, "\n", rules_.text());
  }

 private:
  absl::Status Error(absl::string_view pointer, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at ", Where(pointer)));
  }

  absl::StatusOr<GbnfExpr> Fixed(absl::string_view name) {
    if (absl::Status status = UseFixed(name, &used_fixed_, &rules_); !status.ok()) return status;
    return GbnfRef(name);
  }
  GbnfExpr Space() { return GbnfRef("space"); }

  // A new rule `kind`-N ::= body, referred to. The kinds (kv, tail, obj, arr, item, alt, enum,
  // pattern, def-NAME) are apart from the fixed rules' and any-value's names.
  absl::StatusOr<GbnfExpr> NewRule(absl::string_view kind, const GbnfExpr& body) {
    const std::string name = absl::StrCat(kind, "-", ++rule_count_);
    if (absl::Status status = rules_.Add(name, body); !status.ok()) return status;
    return GbnfRef(name);
  }

  absl::StatusOr<GbnfExpr> AnyValue() {
    if (!any_value_) {
      if (absl::Status status = UseAnyValueDependencies(&used_fixed_, &rules_); !status.ok()) {
        return status;
      }
      const int depth = limits_.max_nesting_depth;
      if (absl::Status status = rules_.AddText(
              AnyValueRules(depth, /*with_value_1=*/true),
              SaturatingMul(kAnyValueElementsPerLevel, depth));
          !status.ok()) {
        return status;
      }
      any_value_ = true;
    }
    return GbnfRef("value-1");
  }

  absl::StatusOr<std::optional<int64_t>> Count(const Json& schema, absl::string_view keyword,
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

  absl::StatusOr<GbnfExpr> Visit(const Json& schema, const std::string& pointer, int depth) {
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

  static bool HasBounds(const Json& schema) {
    for (const char* keyword : kBoundKeywords) {
      if (schema.contains(keyword)) return true;
    }
    return false;
  }

  // An integer within minimum/maximum and their exclusive forms (numbers: integral or not, each
  // within ±(10^16 - 1), the digits of an unbounded integer). Bounds on a number that is not an
  // integer are refused: the grammar of real intervals is not built.
  absl::StatusOr<GbnfExpr> BoundedInteger(const Json& schema, const std::string& pointer) {
    constexpr double kLimit = 9'999'999'999'999'999.0;
    std::optional<int64_t> min, max;
    for (const char* keyword : kBoundKeywords) {
      const auto it = schema.find(keyword);
      if (it == schema.end()) continue;
      const std::string where = absl::StrCat(pointer, "/", keyword);
      if (!it->is_number()) return Error(where, absl::StrCat(keyword, " must be a number"));
      const double bound = it->get<double>();
      if (!(std::fabs(bound) <= kLimit)) {
        return Error(where, absl::StrCat(keyword, " beyond ±(10^16 - 1)"));
      }
      const absl::string_view name = keyword;
      if (absl::StartsWith(name, "exclusiveMin") || name == "minimum") {
        // The least integer allowed: ceil(bound), or the next one above an exclusive bound.
        double least = std::ceil(bound);
        if (name != "minimum" && least == bound) least += 1;
        const int64_t value = static_cast<int64_t>(least);
        min = min.has_value() ? std::max(*min, value) : value;
      } else {
        double most = std::floor(bound);
        if (name != "maximum" && most == bound) most -= 1;
        const int64_t value = static_cast<int64_t>(most);
        max = max.has_value() ? std::min(*max, value) : value;
      }
    }
    if (min.has_value() && max.has_value() && *min > *max) {
      return Error(pointer, "no integer lies within minimum/maximum");
    }
    const std::string name = absl::StrCat("int-", ++rule_count_);
    const std::string body = IntegerRangeGbnf(min, max);
    // Each alternative of the range is a few digit classes: count one element per character.
    if (absl::Status status = rules_.AddText(absl::StrCat(name, " ::= ", body, "\n"),
                                             static_cast<int64_t>(body.size()));
        !status.ok()) {
      return status;
    }
    return GbnfRef(name);
  }

  absl::StatusOr<GbnfExpr> Ref(const Json& ref, const std::string& pointer, int depth) {
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

  absl::StatusOr<GbnfExpr> AnyOf(const Json& any_of, const std::string& pointer, int depth) {
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

  absl::StatusOr<GbnfExpr> Enum(const Json& schema, const std::vector<std::string>& types,
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

  absl::StatusOr<GbnfExpr> String(const Json& schema, const std::string& pointer) {
    const GbnfExpr quote = GbnfLiteral("\"");
    if (schema.contains("pattern")) {
      if (schema.contains("minLength") || schema.contains("maxLength")) {
        return Error(pointer, "minLength or maxLength beside pattern is not supported");
      }
      const std::string where = absl::StrCat(pointer, "/pattern");
      if (!schema["pattern"].is_string()) return Error(where, "pattern must be a string");
      const std::string name = absl::StrCat("pattern-", ++rule_count_);
      absl::StatusOr<RegexRules> pattern = RegexToGbnfRules(
          schema["pattern"].get<std::string>(), limits_, name, /*json_string_content=*/true,
          rules_.max_elements());
      if (!pattern.ok()) return Error(where, pattern.status().message());
      if (absl::Status status = rules_.AddText(pattern->text, pattern->elements); !status.ok()) {
        return status;
      }
      return GbnfSeq({quote, GbnfRef(name), quote});
    }
    absl::StatusOr<std::optional<int64_t>> min = Count(schema, "minLength", pointer);
    if (!min.ok()) return min.status();
    absl::StatusOr<std::optional<int64_t>> max = Count(schema, "maxLength", pointer);
    if (!max.ok()) return max.status();
    if (!min->has_value() && !max->has_value()) return Fixed("string");
    if (absl::StatusOr<GbnfExpr> c = Fixed("char"); !c.ok()) return c.status();
    const int64_t lo = min->value_or(0);
    const int64_t hi = max->value_or(-1);
    if (hi >= 0 && lo > hi) return Error(pointer, "minLength over maxLength");
    if (hi == 0) return GbnfLiteral("\"\"");
    return GbnfSeq({quote, GbnfRepeat(GbnfRef("char"), lo, hi), quote});
  }

  // Visits a member's or item's schema: a reference back to a definition being visited is no
  // longer left recursion once an object or array opened.
  absl::StatusOr<GbnfExpr> VisitInside(const Json& schema, const std::string& pointer,
                                       int depth) {
    absl::flat_hash_set<std::string> outer;
    std::swap(outer, unguarded_);
    absl::StatusOr<GbnfExpr> expr = Visit(schema, pointer, depth);
    std::swap(outer, unguarded_);
    return expr;
  }

  absl::StatusOr<GbnfExpr> Object(const Json& schema, const std::string& pointer, int depth) {
    if (absl::StatusOr<GbnfExpr> s = Fixed("space"); !s.ok()) return s.status();
    const Json empty = Json::object();
    const Json* properties = &empty;
    if (schema.contains("properties")) {
      properties = &schema["properties"];
      if (!properties->is_object()) {
        return Error(absl::StrCat(pointer, "/properties"), "properties must be an object");
      }
    }
    absl::flat_hash_set<std::string> required;
    if (schema.contains("required")) {
      const Json& list = schema["required"];
      const std::string where = absl::StrCat(pointer, "/required");
      if (!list.is_array()) return Error(where, "required must be an array of strings");
      for (const Json& name : list) {
        if (!name.is_string()) return Error(where, "required must be an array of strings");
        if (!properties->contains(name.get<std::string>())) {
          return Error(where, absl::StrCat("required property \"", name.get<std::string>(),
                                           "\" is not in properties"));
        }
        required.insert(name.get<std::string>());
      }
    }
    bool additional = true;
    if (schema.contains("additionalProperties")) {
      const Json& value = schema["additionalProperties"];
      if (!value.is_boolean() && !value.is_object()) {
        return Error(absl::StrCat(pointer, "/additionalProperties"),
                     "additionalProperties must be a boolean or a schema");
      }
      additional = !value.is_boolean() || value.get<bool>();
    }
    const GbnfExpr open = GbnfLiteral("{");
    const GbnfExpr close = GbnfLiteral("}");
    if (properties->empty()) {
      // No properties: any object unless additionalProperties is false.
      if (additional) {
        if (absl::StatusOr<GbnfExpr> any = AnyValue(); !any.ok()) return any.status();
        return GbnfRef("object-1");
      }
      return GbnfSeq({open, Space(), close});
    }
    // One rule per member: "name" : value.
    std::vector<GbnfExpr> members;
    std::vector<bool> is_required;
    for (const auto& [name, property] : properties->items()) {
      absl::StatusOr<GbnfExpr> value = VisitInside(
          property, absl::StrCat(pointer, "/properties/", EscapePointerToken(name)), depth + 1);
      if (!value.ok()) return value.status();
      absl::StatusOr<GbnfExpr> member = NewRule(
          "kv", GbnfSeq({GbnfLiteral(Json(name).dump()), Space(), GbnfLiteral(":"), Space(),
                         *value}));
      if (!member.ok()) return member.status();
      members.push_back(*std::move(member));
      is_required.push_back(required.contains(name));
    }
    const GbnfExpr comma = GbnfSeq({Space(), GbnfLiteral(","), Space()});
    const size_t n = members.size();
    const auto first_required = std::find(is_required.begin(), is_required.end(), true);
    std::vector<GbnfExpr> body = {open, Space()};
    if (first_required != is_required.end()) {
      // Optional members before the first required one carry their comma after them; the
      // others before them.
      const size_t r = static_cast<size_t>(first_required - is_required.begin());
      for (size_t i = 0; i < r; ++i) body.push_back(GbnfRepeat(GbnfSeq({members[i], comma}), 0, 1));
      body.push_back(members[r]);
      for (size_t i = r + 1; i < n; ++i) {
        GbnfExpr next = GbnfSeq({comma, members[i]});
        body.push_back(is_required[i] ? next : GbnfRepeat(next, 0, 1));
      }
      body.push_back(Space());
    } else {
      // All optional: the first present member, then tail-i: the ones after member i, each
      // optional.
      std::vector<GbnfExpr> tails(n);
      for (size_t i = n - 1; i >= 1; --i) {
        GbnfExpr tail = GbnfRepeat(GbnfSeq({comma, members[i]}), 0, 1);
        if (i + 1 < n) tail = GbnfSeq({tail, tails[i + 1]});
        absl::StatusOr<GbnfExpr> rule = NewRule("tail", tail);
        if (!rule.ok()) return rule.status();
        tails[i] = *std::move(rule);
      }
      std::vector<GbnfExpr> firsts;
      for (size_t i = 0; i < n; ++i) {
        firsts.push_back(i + 1 < n ? GbnfSeq({members[i], tails[i + 1]}) : members[i]);
      }
      body.push_back(GbnfRepeat(GbnfSeq({GbnfAlt(firsts), Space()}), 0, 1));
    }
    body.push_back(close);
    return NewRule("obj", GbnfSeq(body));
  }

  absl::StatusOr<GbnfExpr> Array(const Json& schema, const std::string& pointer, int depth) {
    if (absl::StatusOr<GbnfExpr> s = Fixed("space"); !s.ok()) return s.status();
    absl::StatusOr<std::optional<int64_t>> min_items = Count(schema, "minItems", pointer);
    if (!min_items.ok()) return min_items.status();
    absl::StatusOr<std::optional<int64_t>> max_items = Count(schema, "maxItems", pointer);
    if (!max_items.ok()) return max_items.status();
    const int64_t lo = min_items->value_or(0);
    const int64_t hi = max_items->value_or(-1);
    if (hi >= 0 && lo > hi) return Error(pointer, "minItems over maxItems");
    const GbnfExpr open = GbnfLiteral("[");
    const GbnfExpr close = GbnfLiteral("]");
    if (hi == 0) return GbnfSeq({open, Space(), close});
    absl::StatusOr<GbnfExpr> item;
    if (schema.contains("items")) {
      const Json& items = schema["items"];
      const std::string where = absl::StrCat(pointer, "/items");
      if (!items.is_object() && !items.is_boolean()) {
        return Error(where, "items must be a schema (tuple items are not supported)");
      }
      item = VisitInside(items, where, depth + 1);
    } else {
      item = AnyValue();
    }
    if (!item.ok()) return item.status();
    if (!item->atomic) {
      item = NewRule("item", *item);
      if (!item.ok()) return item.status();
    }
    std::vector<GbnfExpr> list = {*item};
    const int64_t more_lo = std::max<int64_t>(lo - 1, 0);
    const int64_t more_hi = hi < 0 ? -1 : hi - 1;
    if (more_hi != 0) {
      const GbnfExpr more = GbnfSeq({Space(), GbnfLiteral(","), Space(), *item});
      list.push_back(more_lo == 1 && more_hi == 1 ? more : GbnfRepeat(more, more_lo, more_hi));
    }
    list.push_back(Space());
    const GbnfExpr items = GbnfSeq(list);
    return NewRule("arr", GbnfSeq({open, Space(), lo == 0 ? GbnfRepeat(items, 0, 1) : items,
                                     close}));
  }

  const Json& root_;
  const ConstraintLimits& limits_;
  GbnfRules rules_;
  absl::flat_hash_set<std::string> used_fixed_;
  bool any_value_ = false;
  int rule_count_ = 0;
  // Definitions by JSON pointer → their rule; those being visited with no object or array opened
  // since (a reference to one of them would be left recursion).
  absl::flat_hash_map<std::string, std::string> ref_rules_;
  absl::flat_hash_set<std::string> unguarded_;
};

}  // namespace

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
  return SchemaCompiler(parsed, limits).Compile();
}

std::string JsonObjectGbnf(const ConstraintLimits& limits) {
  std::string text = "root ::= object-1\n";
  for (const FixedRule& rule : FixedRules()) {
    if (rule.name == "integer") continue;  // numbers only
    absl::StrAppend(&text, rule.name, " ::= ", rule.body, "\n");
  }
  text += AnyValueRules(limits.max_nesting_depth, /*with_value_1=*/false);
  return text;
}

}  // namespace linserve
