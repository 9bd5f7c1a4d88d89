#include "server/constraints/json_value_grammar.h"

#include "absl/strings/str_cat.h"

namespace linserve {

const std::vector<JsonFixedRule>& JsonFixedRules() {
  static const auto* rules = new std::vector<JsonFixedRule>{
      {"space", R"((" " | "\n" [ \t]{0,19})?)", {}, 43},
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

std::string JsonAnyValueRules(int depth, bool with_value_1) {
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

absl::Status UseJsonFixedRule(absl::string_view name, absl::flat_hash_set<std::string>* used,
                              GbnfRules* rules) {
  if (!used->insert(std::string(name)).second) return absl::OkStatus();
  for (const JsonFixedRule& rule : JsonFixedRules()) {
    if (rule.name != name) continue;
    for (absl::string_view dependency : rule.uses) {
      if (absl::Status status = UseJsonFixedRule(dependency, used, rules); !status.ok()) {
        return status;
      }
    }
    return rules->AddText(absl::StrCat(rule.name, " ::= ", rule.body, "\n"), rule.elements);
  }
  return absl::OkStatus();
}

absl::Status UseJsonAnyValueDependencies(absl::flat_hash_set<std::string>* used,
                                         GbnfRules* rules) {
  for (absl::string_view name : {"space", "string", "number", "boolean", "null"}) {
    if (absl::Status status = UseJsonFixedRule(name, used, rules); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace linserve
