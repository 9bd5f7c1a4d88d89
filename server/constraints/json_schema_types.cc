// JsonSchemaCompiler (json_schema_compiler.h): the keywords of each type: string (pattern,
// minLength, maxLength), integer (minimum, maximum and their exclusive forms), object
// (properties, required, additionalProperties) and array (items, minItems, maxItems).
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/constraints/integer_range_grammar.h"
#include "server/constraints/json_schema_compiler.h"
#include "server/constraints/regex_grammar.h"

namespace linserve {
namespace {

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

// The bounds an integer may have (BoundedInteger).
constexpr const char* kBoundKeywords[] = {"minimum", "maximum", "exclusiveMinimum",
                                          "exclusiveMaximum"};

}  // namespace

bool JsonSchemaCompiler::HasBounds(const Json& schema) {
  for (const char* keyword : kBoundKeywords) {
    if (schema.contains(keyword)) return true;
  }
  return false;
}

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::BoundedInteger(const Json& schema,
                                                            const std::string& pointer) {
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

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::String(const Json& schema,
                                                    const std::string& pointer) {
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

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Object(const Json& schema, const std::string& pointer,
                                                    int depth) {
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

absl::StatusOr<GbnfExpr> JsonSchemaCompiler::Array(const Json& schema, const std::string& pointer,
                                                   int depth) {
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

}  // namespace linserve
