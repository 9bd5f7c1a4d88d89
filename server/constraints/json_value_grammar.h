// The GBNF of JSON values that the JSON-schema compiler and json_object share: the fixed rules
// (space, char, string, integral-part, integer, number, boolean, null), each with what it refers
// to and its element estimate, and the rules of any JSON value nested at most a given depth.
#ifndef LINSERVE_SERVER_CONSTRAINTS_JSON_VALUE_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_JSON_VALUE_GRAMMAR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/constraints/gbnf_builder.h"

namespace linserve {

// Whitespace between two tokens is at most 20 characters: nothing, one space, or a newline and
// up to 19 spaces or tabs (llama.cpp's rule, a tab shorter: a model that drifts into whitespace
// spends at most 20 tokens on a gap).
// A \u escape is 4 hex digits naming a character: a high surrogate only with its low one.
// Numbers have at most 16 digits before the point and after it (as llama.cpp's) and an exponent
// of at most 2 digits, so every one is a finite double.
struct JsonFixedRule {
  absl::string_view name;
  absl::string_view body;
  std::vector<absl::string_view> uses;
  int64_t elements;
};
const std::vector<JsonFixedRule>& JsonFixedRules();

// Any JSON value, its objects and arrays nested at most `depth` deep: the rules value-d,
// object-d, member-d, array-d for d = 1..depth (a container at level d holds values of level
// d + 1), and scalar (no container) past the last level. `with_value_1`: also value-1 and array-1
// (json_object's root is object-1 alone).
std::string JsonAnyValueRules(int depth, bool with_value_1);
// The element estimate of JsonAnyValueRules per level of depth.
inline constexpr int64_t kJsonAnyValueElementsPerLevel = 40;

// Adds fixed rule `name` and those it uses to `rules`, once (`used` holds those added).
absl::Status UseJsonFixedRule(absl::string_view name, absl::flat_hash_set<std::string>* used,
                              GbnfRules* rules);
// Adds the fixed rules JsonAnyValueRules uses.
absl::Status UseJsonAnyValueDependencies(absl::flat_hash_set<std::string>* used,
                                         GbnfRules* rules);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_JSON_VALUE_GRAMMAR_H_
