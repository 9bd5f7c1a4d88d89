#include "server/constraints/json_schema_grammar.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/constraints/byte_documents.h"
#include "tests/server/constraints/json_schema_cases.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Whether `doc` is valid under `schema` (the subset, written from the JSON Schema spec without
// the grammar: an independent check of what the grammar generates).
bool ValidUnder(const nlohmann::json& schema, const nlohmann::json& doc,
                const nlohmann::json& root) {
  using nlohmann::json;
  if (schema.is_boolean()) return schema.get<bool>();
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    return ValidUnder(ref == "#" ? root : root.at(json::json_pointer(ref.substr(1))), doc, root);
  }
  if (schema.contains("anyOf")) {
    for (const json& branch : schema["anyOf"]) {
      if (ValidUnder(branch, doc, root)) return true;
    }
    return false;
  }
  if (schema.contains("const") && doc != schema["const"]) return false;
  if (schema.contains("enum") &&
      std::find(schema["enum"].begin(), schema["enum"].end(), doc) == schema["enum"].end()) {
    return false;
  }
  if (schema.contains("type")) {
    const json types = schema["type"].is_array() ? schema["type"] : json::array({schema["type"]});
    bool typed = false;
    for (const json& type : types) {
      const std::string t = type;
      typed |= (t == "string" && doc.is_string()) || (t == "number" && doc.is_number()) ||
               (t == "integer" && doc.is_number_integer()) ||
               (t == "boolean" && doc.is_boolean()) || (t == "null" && doc.is_null()) ||
               (t == "object" && doc.is_object()) || (t == "array" && doc.is_array());
    }
    if (!typed) return false;
  }
  if (doc.is_string()) {
    const std::string text = doc;
    int64_t chars = 0;
    for (char c : text) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    if (schema.contains("minLength") && chars < schema["minLength"].get<int64_t>()) return false;
    if (schema.contains("maxLength") && chars > schema["maxLength"].get<int64_t>()) return false;
    if (schema.contains("pattern") &&
        !std::regex_search(text, std::regex(schema["pattern"].get<std::string>()))) {
      return false;
    }
  }
  if (doc.is_object()) {
    const json properties = schema.value("properties", json::object());
    for (const auto& [name, value] : doc.items()) {
      if (properties.contains(name)) {
        if (!ValidUnder(properties[name], value, root)) return false;
      } else if (schema.contains("additionalProperties") &&
                 !ValidUnder(schema["additionalProperties"], value, root)) {
        return false;
      }
    }
    for (const json& name : schema.value("required", json::array())) {
      if (!doc.contains(name.get<std::string>())) return false;
    }
  }
  if (doc.is_array()) {
    const int64_t n = static_cast<int64_t>(doc.size());
    if (schema.contains("minItems") && n < schema["minItems"].get<int64_t>()) return false;
    if (schema.contains("maxItems") && n > schema["maxItems"].get<int64_t>()) return false;
    for (const json& item : doc) {
      if (schema.contains("items") && !ValidUnder(schema["items"], item, root)) return false;
    }
  }
  return true;
}

std::string Gbnf(std::string_view schema, const ConstraintLimits& limits = {}) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema, limits);
  EXPECT_TRUE(gbnf.ok()) << schema << ": " << gbnf.status();
  return gbnf.ok() ? *gbnf : "";
}

std::string Refusal(std::string_view schema, const ConstraintLimits& limits = {}) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema, limits);
  EXPECT_FALSE(gbnf.ok()) << schema << " compiled to:\n" << *gbnf;
  if (gbnf.ok()) return "";
  EXPECT_EQ(gbnf.status().code(), absl::StatusCode::kInvalidArgument) << schema;
  return std::string(gbnf.status().message());
}

constexpr char kChar[] =
    R"(char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3})"
    R"( | [dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F])"
    R"( [0-9a-fA-F]{2})))"
    "\n";
constexpr char kSpace[] = R"(space ::= (" " | "\n" [ \t]{0,19})?)" "\n";

TEST(JsonSchemaGrammarTest, WritesAString) {
  EXPECT_EQ(Gbnf(R"({"type": "string", "title": "t", "description": "d"})"),
            absl::StrCat("root ::= string\n", kChar, "string ::= \"\\\"\" char* \"\\\"\"\n"));
}

TEST(JsonSchemaGrammarTest, WritesAnObjectWithRequiredAndOptionalPropertiesInOrder) {
  EXPECT_EQ(
      Gbnf(R"({"type": "object", "properties": {
                 "id": {"type": "integer"}, "name": {"type": "string", "maxLength": 2},
                 "tags": {"type": "array", "items": {"enum": ["a", 1]}, "minItems": 1,
                          "maxItems": 3}},
               "required": ["name"], "additionalProperties": false})"),
      absl::StrCat(
          "root ::= obj-6\n", kSpace,
          "integral-part ::= \"0\" | [1-9] [0-9]{0,15}\n"
          "integer ::= \"-\"? integral-part\n"
          "kv-1 ::= \"\\\"id\\\"\" space \":\" space integer\n",
          kChar,
          "kv-2 ::= \"\\\"name\\\"\" space \":\" space \"\\\"\" char{0,2} \"\\\"\"\n"
          "enum-3 ::= (\"\\\"a\\\"\" | \"1\")\n"
          "arr-4 ::= \"[\" space enum-3 (space \",\" space enum-3){0,2} space \"]\"\n"
          "kv-5 ::= \"\\\"tags\\\"\" space \":\" space arr-4\n"
          "obj-6 ::= \"{\" space (kv-1 space \",\" space)? kv-2 (space \",\" space kv-5)? "
          "space \"}\"\n"));
}

TEST(JsonSchemaGrammarTest, WritesAnObjectWithOnlyOptionalProperties) {
  const std::string gbnf = Gbnf(R"({"properties": {"a": {"type": ["string", "null"]},
      "b": {"const": {"x": [1, 2]}}, "c": {"pattern": "^[a-z]+$"}}})");
  EXPECT_THAT(gbnf, StartsWith("root ::= obj-7\n"));
  EXPECT_THAT(gbnf, HasSubstr("kv-1 ::= \"\\\"a\\\"\" space \":\" space (string | null)\n"));
  EXPECT_THAT(gbnf, HasSubstr("kv-2 ::= \"\\\"b\\\"\" space \":\" space "
                              "\"{\\\"x\\\":[1,2]}\"\n"));
  EXPECT_THAT(gbnf, HasSubstr("pattern-3 ::= [a-z]+\n"
                              "kv-4 ::= \"\\\"c\\\"\" space \":\" space \"\\\"\" pattern-3 "
                              "\"\\\"\"\n"
                              "tail-5 ::= (space \",\" space kv-4)?\n"
                              "tail-6 ::= (space \",\" space kv-2)? tail-5\n"
                              "obj-7 ::= \"{\" space ((kv-1 tail-6 | kv-2 tail-5 | kv-4) "
                              "space)? \"}\"\n"));
}

TEST(JsonSchemaGrammarTest, WritesRecursiveDefinitionsAsRules) {
  const std::string gbnf = Gbnf(R"({"$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "number"},
                     "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v", "kids"]}}, "$ref": "#/$defs/node"})");
  EXPECT_THAT(gbnf, StartsWith("root ::= def-node-1\n"));
  EXPECT_THAT(gbnf, HasSubstr("arr-3 ::= \"[\" space (def-node-1 (space \",\" space "
                              "def-node-1)* space)? \"]\"\n"));
  EXPECT_THAT(gbnf, HasSubstr("def-node-1 ::= obj-5\n"));
  // The root itself, and #/definitions.
  EXPECT_THAT(Gbnf(R"({"type": "array", "items": {"anyOf": [{"type": "null"}, {"$ref": "#"}]}})"),
              HasSubstr("alt-1 ::= (null | root)\n"));
  EXPECT_THAT(Gbnf(R"({"definitions": {"a~b/c": {"type": "boolean"}},
                       "$ref": "#/definitions/a~0b~1c"})"),
              StartsWith("root ::= def-a-b-c-1\n"));
}

TEST(JsonSchemaGrammarTest, AnyValueIsBoundedByTheNestingLimit) {
  ConstraintLimits limits;
  limits.max_nesting_depth = 2;
  const std::string any = Gbnf("{}", limits);
  EXPECT_THAT(any, StartsWith("root ::= value-1\n"));
  EXPECT_THAT(any, HasSubstr("value-2 ::= object-2 | array-2 | string | number | boolean | null\n"
                             "array-2 ::= \"[\" space (scalar (space \",\" space scalar)* space)? "
                             "\"]\"\n"));
  EXPECT_THAT(any, Not(HasSubstr("value-3")));
  EXPECT_THAT(Gbnf(R"({"type": "object"})", limits), StartsWith("root ::= object-1\n"));
  EXPECT_THAT(Gbnf(R"({"type": "object", "additionalProperties": false})", limits),
              StartsWith("root ::= \"{\" space \"}\"\n"));
}

// Rule names never collide, whatever the schema mixes (an object's own rules and any value's).
TEST(JsonSchemaGrammarTest, DefinesEachRuleOnce) {
  for (const SchemaCase& c : SchemaCases()) {
    std::set<std::string> names;
    for (absl::string_view line : absl::StrSplit(Gbnf(c.schema), '\n', absl::SkipEmpty())) {
      const std::string name(line.substr(0, line.find(" ::= ")));
      EXPECT_TRUE(names.insert(name).second) << "rule " << name << " twice in\n" << c.schema;
    }
  }
}

TEST(JsonSchemaGrammarTest, JsonObjectIsAnObjectOfAnyValues) {
  ConstraintLimits limits;
  limits.max_nesting_depth = 2;
  const std::string gbnf = JsonObjectGbnf(limits);
  EXPECT_THAT(gbnf, StartsWith("root ::= object-1\n"));
  EXPECT_THAT(gbnf, HasSubstr("object-1 ::= \"{\" space (member-1 (space \",\" space member-1)* "
                              "space)? \"}\"\n"
                              "member-1 ::= string space \":\" space value-2\n"
                              "value-2 ::= object-2 | array-2 | string | number | boolean | null\n"));
  EXPECT_THAT(gbnf, HasSubstr("member-2 ::= string space \":\" space scalar\n"
                              "scalar ::= string | number | boolean | null\n"));
  EXPECT_THAT(gbnf, Not(HasSubstr("value-1")));
  EXPECT_THAT(gbnf, Not(HasSubstr("object-3")));
  EXPECT_THAT(JsonObjectGbnf(ConstraintLimits()), HasSubstr("member-64 ::= string space \":\" "
                                                            "space scalar\n"));
}

TEST(JsonSchemaGrammarTest, RefusesEveryKeywordOutsideTheSubsetNamingItsPointer) {
  for (const char* keyword :
       {"format", "multipleOf",
        "allOf", "oneOf", "not", "if", "then", "else", "patternProperties", "propertyNames",
        "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
        "unevaluatedProperties", "prefixItems", "contains", "minContains", "uniqueItems",
        "unevaluatedItems", "contentEncoding", "contentMediaType", "nullable", "$anchor",
        "$dynamicRef", "readOnly", "x-custom"}) {
    const std::string field = absl::StrCat("\"", keyword, "\": 1");
    EXPECT_EQ(Refusal(absl::StrCat(R"({"type": "object", "properties": {"a/b~": {"type": "string", )",
                                   field, "}}}")),
              absl::StrCat("unsupported keyword \"", keyword, "\" at /properties/a~1b~0"));
    EXPECT_EQ(Refusal(absl::StrCat("{", field, "}")),
              absl::StrCat("unsupported keyword \"", keyword, "\" at the root"));
  }
  EXPECT_EQ(Refusal(R"({"type": "array", "items": {"format": "date"}})"),
            "unsupported keyword \"format\" at /items");
  EXPECT_EQ(Refusal(R"({"anyOf": [{"type": "null"}, {"format": "date"}]})"),
            "unsupported keyword \"format\" at /anyOf/1");
  EXPECT_EQ(Refusal(R"({"$defs": {"d": {"format": "date"}}, "$ref": "#/$defs/d"})"),
            "unsupported keyword \"format\" at /$defs/d");
}

TEST(JsonSchemaGrammarTest, BoundsAreSupportedOnIntegersOnly) {
  EXPECT_EQ(Refusal(R"({"type": "number", "minimum": 1})"),
            "minimum/maximum are supported on type \"integer\" only at the root");
  EXPECT_EQ(Refusal(R"({"properties": {"a": {"maximum": 1}}})"),
            "minimum/maximum are supported on type \"integer\" only at /properties/a");
  EXPECT_EQ(Refusal(R"({"type": "integer", "minimum": 3, "exclusiveMaximum": 3})"),
            "no integer lies within minimum/maximum at the root");
  EXPECT_EQ(Refusal(R"({"type": "integer", "maximum": 1e17})"),
            "maximum beyond ±(10^16 - 1) at /maximum");
  EXPECT_EQ(Refusal(R"({"type": "integer", "minimum": "1"})"), "minimum must be a number at /minimum");
}

TEST(JsonSchemaGrammarTest, RefusesMalformedSchemas) {
  const struct {
    const char* schema;
    const char* message;
  } cases[] = {
      {R"({"type": )", "schema is not JSON: "},
      {R"("string")", "a schema must be an object or a boolean at the root"},
      {R"(false)", "schema false (no value is valid) at the root"},
      {R"({"type": "date"})", "unknown type \"date\" at /type"},
      {R"({"type": []})", "type must be a string or a non-empty array of strings at /type"},
      {R"({"type": [1]})", "type must be a string or strings at /type"},
      {R"({"properties": []})", "properties must be an object at /properties"},
      {R"({"properties": {"a": {}}, "required": ["b"]})",
       "required property \"b\" is not in properties at /required"},
      {R"({"properties": {"a": {}}, "required": "a"})",
       "required must be an array of strings at /required"},
      {R"({"additionalProperties": 1})",
       "additionalProperties must be a boolean or a schema at /additionalProperties"},
      {R"({"items": [{}]})", "items must be a schema (tuple items are not supported) at /items"},
      {R"({"minItems": -1})", "minItems must be a non-negative integer at /minItems"},
      {R"({"maxItems": 1.5})", "maxItems must be a non-negative integer at /maxItems"},
      {R"({"minItems": 3, "maxItems": 2})", "minItems over maxItems at the root"},
      {R"({"minLength": 3, "maxLength": 2})", "minLength over maxLength at the root"},
      {R"({"maxLength": 2000000000})", "maxLength over 1000000000 at /maxLength"},
      {R"({"maxItems": 1e300})", "maxItems over 1000000000 at /maxItems"},
      {R"({"minLength": 2.0, "maxLength": 1.0})", "minLength over maxLength at the root"},
      {R"({"enum": []})", "enum must be a non-empty array at /enum"},
      {R"({"type": "string", "enum": [1, null]})", "no value is of the schema's type at /enum"},
      {R"({"enum": [1], "const": 1})", "keyword \"const\" beside \"enum\" is not supported"},
      {R"({"enum": [1], "pattern": "a"})", "keyword \"pattern\" beside \"enum\" is not supported"},
      {R"({"anyOf": []})", "anyOf must be a non-empty array of schemas at /anyOf"},
      {R"({"anyOf": [{}], "type": "string"})",
       "keyword \"type\" beside \"anyOf\" is not supported at the root"},
      {R"({"$ref": "#/$defs/a", "type": "string", "$defs": {"a": {}}})",
       "keyword \"type\" beside \"$ref\" is not supported at the root"},
      {R"({"$ref": "https://example.com/s.json"})",
       "$ref \"https://example.com/s.json\" is not supported"},
      {R"({"$ref": "#/$defs/missing"})", "$ref \"#/$defs/missing\" names nothing at /$ref"},
      {R"({"$ref": 1})", "$ref must be a string at /$ref"},
      {R"({"$defs": []})", "$defs must be an object at /$defs"},
      {R"({"$ref": "#"})", "$ref \"#\" refers to itself with no object or array between"},
      {R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}},
          "$ref": "#/$defs/a"})",
       "$ref \"#/$defs/a\" refers to itself with no object or array between"},
      {R"js({"pattern": "a(?=b)"})js",
       "regex at offset 1: lookaround is not supported at /pattern"},
      {R"({"pattern": "a\"b"})",
       "regex at offset 1: matches only characters a JSON string must escape at /pattern"},
      {R"({"pattern": "a", "minLength": 1})",
       "minLength or maxLength beside pattern is not supported at the root"},
      {R"({"pattern": 1})", "pattern must be a string at /pattern"},
  };
  for (const auto& c : cases) EXPECT_THAT(Refusal(c.schema), HasSubstr(c.message)) << c.schema;
}

TEST(JsonSchemaGrammarTest, RefusesSchemasBeyondTheLimits) {
  ConstraintLimits limits;
  limits.max_text_bytes = 20;
  EXPECT_EQ(Refusal(R"({"type":    "string"})", limits),
            "schema of 21 bytes exceeds max_text_bytes (20)");
  EXPECT_TRUE(JsonSchemaToGbnf(R"({"type":   "string"})", limits).ok());

  // Nesting: every subschema is a level.
  const auto nested = [](int levels) {
    std::string schema = R"({"type": "string"})";
    for (int i = 1; i < levels; ++i) schema = absl::StrCat(R"({"items": )", schema, "}");
    return schema;
  };
  limits = ConstraintLimits();
  limits.max_nesting_depth = 5;
  EXPECT_TRUE(JsonSchemaToGbnf(nested(5), limits).ok());
  EXPECT_EQ(Refusal(nested(6), limits),
            "schema nested deeper than max_nesting_depth (5) at /items/items/items/items/items");
  // Text nested far deeper is refused while it is parsed.
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  EXPECT_EQ(Refusal(absl::StrCat(R"({"const": )", deep, "}")),
            "schema nested deeper than max_nesting_depth (64)");

  // Grammar size: huge enums and repetitions are refused, quickly.
  const auto start = std::chrono::steady_clock::now();
  limits = ConstraintLimits();
  limits.max_grammar_elements = 2000;
  std::string values = "0";
  for (int i = 1; i < 1000; ++i) absl::StrAppend(&values, ",", 1000 + i);
  EXPECT_EQ(Refusal(absl::StrCat(R"({"enum": [)", values, "]}"), limits),
            "the grammar would exceed max_grammar_elements (2000)");
  EXPECT_EQ(Refusal(R"({"type": "array", "items": {"type": "integer"}, "maxItems": 1000000})"),
            "the grammar would exceed max_grammar_elements (262144)");
  EXPECT_EQ(Refusal(R"({"type": "string", "maxLength": 1000000})"),
            "the grammar would exceed max_grammar_elements (262144)");
  EXPECT_THAT(Refusal(R"({"type": "string", "pattern": "(a{1000}){1000}"})"),
              HasSubstr("max_grammar_elements (262144)"));
  // Many levels of repetition multiply.
  std::string repeated = R"({"type": "integer"})";
  for (int i = 0; i < 4; ++i) {
    repeated = absl::StrCat(R"({"type": "array", "minItems": 100, "maxItems": 100, "items": )",
                            repeated, "}");
  }
  EXPECT_TRUE(JsonSchemaToGbnf(repeated, ConstraintLimits()).ok())
      << "each level is its own rule: 4 x 100 references, not 100^4";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// The acceptance data (json_schema_cases.h) is well formed: every schema compiles and every
// document it lists as valid is JSON.
TEST(JsonSchemaGrammarTest, AcceptanceCasesAreWellFormed) {
  for (const SchemaCase& c : SchemaCases()) {
    EXPECT_TRUE(JsonSchemaToGbnf(c.schema, ConstraintLimits()).ok()) << c.schema;
    for (const std::string& doc : c.valid) {
      EXPECT_TRUE(nlohmann::json::accept(doc)) << c.schema << "\n" << doc;
    }
  }
}

// End to end: the grammar of each schema accepts its valid documents and rejects the others.
TEST(JsonSchemaGrammarTest, AcceptsValidDocumentsAndRejectsInvalidOnes) {
  for (const SchemaCase& c : SchemaCases()) {
    const auto constraint = CompileForBytes({ConstraintKind::kJsonSchema, c.schema});
    ASSERT_NE(constraint, nullptr) << c.schema;
    for (const std::string& doc : c.valid) EXPECT_TRUE(Accepts(constraint, doc)) << c.schema << "\n" << doc;
    for (const std::string& doc : c.invalid) {
      EXPECT_FALSE(Accepts(constraint, doc)) << c.schema << "\n" << doc;
    }
  }
}

// The validator above agrees with the acceptance data, and every random document the masks
// allow is JSON that it accepts.
TEST(JsonSchemaGrammarTest, RandomDocumentsAreValid) {
  std::mt19937 rng(27);
  for (const SchemaCase& c : SchemaCases()) {
    const nlohmann::json schema = nlohmann::json::parse(c.schema);
    for (const std::string& doc : c.valid) {
      EXPECT_TRUE(ValidUnder(schema, nlohmann::json::parse(doc), schema)) << c.schema << "\n" << doc;
    }
    const auto constraint = CompileForBytes({ConstraintKind::kJsonSchema, c.schema});
    ASSERT_NE(constraint, nullptr) << c.schema;
    int finished = 0;
    for (int i = 0; i < 200; ++i) {
      const std::optional<std::string> doc = RandomDocument(constraint, rng, 400);
      if (!doc.has_value()) continue;
      ++finished;
      const nlohmann::json parsed = nlohmann::json::parse(*doc, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(parsed.is_discarded()) << c.schema << "\nnot JSON: " << *doc;
      EXPECT_TRUE(ValidUnder(schema, parsed, schema)) << c.schema << "\ninvalid: " << *doc;
    }
    EXPECT_GT(finished, 50) << c.schema;
  }
}

// `doc` without the whitespace outside its strings.
std::string Compact(absl::string_view doc) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < doc.size(); ++i) {
    const char c = doc[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < doc.size()) {
        out += doc[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    in_string = c == '"';
    out += c;
  }
  return out;
}

// Where whitespace may go in a compact document: the positions next to a structural character
// outside strings.
std::vector<size_t> Gaps(absl::string_view doc) {
  std::vector<bool> structural(doc.size(), false);
  bool in_string = false;
  for (size_t i = 0; i < doc.size(); ++i) {
    if (in_string) {
      if (doc[i] == '\\') {
        ++i;
      } else if (doc[i] == '"') {
        in_string = false;
      }
      continue;
    }
    in_string = doc[i] == '"';
    structural[i] = absl::string_view("{}[],:").find(doc[i]) != absl::string_view::npos;
  }
  std::vector<size_t> gaps;
  for (size_t i = 1; i < doc.size(); ++i) {
    if (structural[i - 1] || structural[i]) gaps.push_back(i);
  }
  return gaps;
}

// Whitespace between two JSON tokens is bounded, as llama.cpp's JSON grammar bounds it: at
// most 20 characters (nothing, one space, or a newline and up to 19 spaces or tabs), for every
// schema case's valid documents and json_object alike, at every place whitespace may go.
TEST(JsonSchemaGrammarTest, WhitespaceBetweenTokensIsAtMostTwentyCharacters) {
  const std::string twenty = "\n" + std::string(19, ' ');
  const std::string newline_then_twenty = "\n" + std::string(20, '\t');
  const std::string space_then_twenty = " " + twenty;  // two whitespace rules in a row
  const auto json_object = CompileForBytes({ConstraintKind::kJsonObject, ""});
  ASSERT_NE(json_object, nullptr);
  int checked = 0;
  for (const SchemaCase& c : SchemaCases()) {
    const auto constraint = CompileForBytes({ConstraintKind::kJsonSchema, c.schema});
    ASSERT_NE(constraint, nullptr) << c.schema;
    for (const std::string& valid : c.valid) {
      const std::string doc = Compact(valid);
      if (!Accepts(constraint, doc)) continue;  // a schema whose documents need whitespace
      const bool object = !doc.empty() && doc[0] == '{';
      for (size_t gap : Gaps(doc)) {
        SCOPED_TRACE(absl::StrCat(c.schema, "\n", doc, " at ", gap));
        auto with = [&](const std::string& run) {
          return doc.substr(0, gap) + run + doc.substr(gap);
        };
        // (A const or enum container is its literal text: no whitespace inside.)
        if (Accepts(constraint, with(" "))) {
          EXPECT_TRUE(Accepts(constraint, with(twenty)));
        }
        EXPECT_FALSE(Accepts(constraint, with(newline_then_twenty)));
        EXPECT_FALSE(Accepts(constraint, with(space_then_twenty)));
        if (object && Accepts(json_object, doc)) {
          EXPECT_TRUE(Accepts(json_object, with(twenty)));
          EXPECT_FALSE(Accepts(json_object, with(newline_then_twenty)));
          EXPECT_FALSE(Accepts(json_object, with(space_then_twenty)));
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
}

TEST(JsonSchemaGrammarTest, JsonObjectAcceptsObjectsNestedWithinTheLimit) {
  ConstraintLimits limits;
  limits.max_nesting_depth = 3;
  const auto constraint = CompileForBytes({ConstraintKind::kJsonObject, ""}, limits);
  ASSERT_NE(constraint, nullptr);
  for (const char* doc : {"{}", R"({"a":1})", R"({"a": [1, {"b": null}], "c": "x"})",
                          R"({"a":{"b":{"c":1}}})", "{\n  \"a\": true\n}"}) {
    EXPECT_TRUE(Accepts(constraint, doc)) << doc;
  }
  // Four levels of objects and arrays are one too many.
  for (const char* doc : {"[]", "1", R"("s")", R"({"a":{"b":{"c":[]}}})",
                          R"({"a":[[[1]]]})", R"({"a":1,})", R"( {})", R"({} )"}) {
    EXPECT_FALSE(Accepts(constraint, doc)) << doc;
  }
  EXPECT_NE(CompileForBytes({ConstraintKind::kJsonObject, ""}), nullptr)
      << "the default limits' grammar compiles";

  // Random documents are JSON objects nested at most 3 deep.
  const std::function<int(const nlohmann::json&)> depth = [&](const nlohmann::json& j) {
    int inner = 0;
    if (j.is_object() || j.is_array()) {
      for (const nlohmann::json& child : j) inner = std::max(inner, depth(child));
      return inner + 1;
    }
    return 0;
  };
  std::mt19937 rng(27);
  int finished = 0;
  for (int i = 0; i < 200; ++i) {
    const std::optional<std::string> doc = RandomDocument(constraint, rng, 400);
    if (!doc.has_value()) continue;
    ++finished;
    const nlohmann::json parsed = nlohmann::json::parse(*doc, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(parsed.is_object()) << *doc;
    EXPECT_LE(depth(parsed), 3) << *doc;
  }
  EXPECT_GT(finished, 50);
}

}  // namespace
}  // namespace linserve
