// Acceptance data for JsonSchemaToGbnf: schemas, documents each must accept and documents each
// must reject (the grammar's whole language, whitespace rules and bounds included). Valid
// documents are in the form the grammar generates: members in declared order, whitespace only
// as llama.cpp's (nothing, one space, or a newline and up to 20 spaces or tabs) and none around
// the root value.
#ifndef LINSERVE_TESTS_SERVER_CONSTRAINTS_JSON_SCHEMA_CASES_H_
#define LINSERVE_TESTS_SERVER_CONSTRAINTS_JSON_SCHEMA_CASES_H_

#include <string>
#include <vector>

namespace linserve {

struct SchemaCase {
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

inline std::vector<SchemaCase> SchemaCases() {
  return {
      {R"({"type": "object", "properties": {"name": {"type": "string"},
           "age": {"type": "integer"},
           "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.com$"}},
           "required": ["name", "age"], "additionalProperties": false})",
       {R"({"name":"Al","age":3})", R"({"name":"","age":-12,"email":"a@b.com"})",
        R"({ "name" : "x\"y\u00e9\/" , "age" : 0 })", "{\n  \"name\": \"A\",\n\t\"age\": 1\n}",
        R"({"name":"caf\u00e9 ☃","age":7})"},
       {R"({"age":3,"name":"Al"})", R"({"name":"Al"})", R"({"name":"Al","age":3,"x":1})",
        R"({"name":"Al","age":03})", R"({"name":"Al","age":3.5})", R"( {"name":"Al","age":3})",
        R"({"name":"Al","age":3} )", R"({"name":"Al","age":3,"email":"A@b.com"})",
        R"({"name":"a\qb","age":1})", R"({"name":"Al","age":3,})",
        R"({"name":"Al",  "age":3})", "{\"name\":\"a\tb\",\"age\":1}"}},
      {R"({"type": "object", "properties": {
           "kind": {"enum": ["a", "b", null, 1.5, {"x": [true]}]},
           "v": {"type": ["string", "null"]}, "c": {"const": "k"}},
           "required": ["kind", "v", "c"]})",
       {R"({"kind":"a","v":null,"c":"k"})", R"({"kind":{"x":[true]},"v":"s","c":"k"})",
        R"({"kind":1.5,"v":"","c":"k"})", R"({"kind":null,"v":null,"c":"k"})"},
       {R"({"kind":"c","v":null,"c":"k"})", R"({"kind":"a","v":1,"c":"k"})",
        R"({"kind":"a","v":null,"c":"j"})", R"({"kind":{"x": [true]},"v":null,"c":"k"})"}},
      {R"({"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3})",
       {"[1,2]", "[1.5e3, -0.25, 0]", "[ 1 , 2 ]"},
       {"[1]", "[1,2,3,4]", "[]", "[1,,2]", "[01,2]", "[1.,2]", "[1,2"}},
      {R"({"type": "array", "items": {"type": "boolean"}})",
       {"[]", "[true]", "[ ]", "[true,false,true]"},
       {"[true,]", "[,true]", "[1]"}},
      {R"({"properties": {"a": {"type": "integer"}, "b": {"type": "boolean"},
           "c": {"type": "null"}}})",
       {"{}", R"({"a":1})", R"({"b":true})", R"({"c":null})", R"({"a":1,"c":null})",
        R"({"b":false,"c":null})", R"({"a":1,"b":true,"c":null})", "{ }"},
       {R"({"b":true,"a":1})", R"({,"a":1})", R"({"a":1,})", R"({"a":1 "b":true})",
        R"({"d":1})"}},
      {R"({"$defs": {"t": {"type": "object", "properties": {"v": {"type": "integer"},
           "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "required": ["v"]}},
           "$ref": "#/$defs/t"})",
       {R"({"v":1})", R"({"v":1,"kids":[]})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"},
       {R"({"kids":[]})", R"({"v":1,"kids":[{}]})", R"({"v":1,"kids":[1]})"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("abc")", R"("\u00e9\n")", R"("é☃")", R"("\ud83d\ude00a")"},
       {R"("a")", R"("abcd")", R"("\ud83d")", R"("a\ud83da")", R"("\x")", R"("a\u12")",
        R"("ab)", "\"a\tb\""}},
      {R"({"type": "string", "pattern": "^\\d{3}-[A-Z]{2}(x|yz)?$"})",
       {R"("123-AB")", R"("000-ZZx")", R"("999-QRyz")"},
       {R"("12-AB")", R"("123-ab")", R"("123-ABy")", R"("123-AB ")"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "string"},
           "maxItems": 1}]})",
       {"7", "[]", R"(["x"])"},
       {R"(["x","y"])", "1.5", R"("x")"}},
      {"{}",
       {"1", R"("s")", R"([1,{"a":null}])", R"({"a":[true,false]})", "null"},
       {"nul", "[1,]", R"({"a"})", "01", "tru"}},
      // Numbers: at most 16 digits before the point and after it (as llama.cpp bounds them), an
      // exponent of at most 2 digits (every number a finite double).
      {R"({"type": "number"})",
       {"0", "-0", "1.25", "1e10", "-3.5E-2", "1234567890123456", "9.5e+99", "1e0"},
       {".5", "1.", "+1", "01", "1e", "--1", "0x10", "NaN", "12345678901234567", "1e100",
        "1e05"}},
      // Bounds on integers (what zod's int() sends: the JavaScript safe integers).
      {R"({"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991})",
       {"0", "-7", "9007199254740991", "-9007199254740991"},
       {"9007199254740992", "-9007199254740992", "1.5", "01"}},
      {R"({"type": "integer", "exclusiveMinimum": 2.5, "exclusiveMaximum": 120})",
       {"3", "99", "119"},
       {"2", "120", "-5", "1000"}},
      {R"({"type": "integer"})",
       {"0", "-7", "1234567890123456"},
       {"1.0", "1e3", "-", "00"}},
      // Declared members beside members of any value (whose rules are unrolled per level).
      {R"({"type": "object", "properties": {"meta": {}, "list": {"type": "array"},
           "obj": {"type": "object"}, "n": {"type": "integer"}}, "required": ["n"]})",
       {R"({"n":1})", R"({"meta":{"a":[1,{"b":null}]},"n":2})",
        R"({"meta":"x","list":[1,"a",[]],"obj":{"k":{}},"n":-3})"},
       {R"({"meta":1})", R"({"obj":[],"n":1})", R"({"list":{},"n":1})", R"({"n":1,"meta":1})"}},
      {R"({"type": "object", "properties": {"p": {"type": "object",
           "properties": {"q": {"type": "boolean"}}, "required": ["q"]}}, "required": ["p"]})",
       {R"({"p":{"q":true}})", "{\"p\":\n{\"q\":false}}"},
       {R"({"p":{}})", R"({"p":{"q":1}})"}},
  };
}

}  // namespace linserve

#endif  // LINSERVE_TESTS_SERVER_CONSTRAINTS_JSON_SCHEMA_CASES_H_
