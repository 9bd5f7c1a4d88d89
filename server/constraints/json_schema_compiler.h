// JsonSchemaCompiler: a parsed JSON schema (the subset JsonSchemaToGbnf documents) to GBNF, one
// visit of the schema. json_schema_compiler.cc holds the visit (the keywords allowed together,
// "type"), $ref, anyOf, enum and const; json_schema_types.cc the keywords of each type (string,
// bounded integer, object, array).
//
// Not thread-safe: one per schema.
#ifndef LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_COMPILER_H_
#define LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_COMPILER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "server/constraints/constraint_spec.h"
#include "server/constraints/gbnf_builder.h"

namespace linserve {

class JsonSchemaCompiler {
 public:
  using Json = nlohmann::ordered_json;

  // `root` and `limits` must outlive the compiler.
  JsonSchemaCompiler(const Json& root, const ConstraintLimits& limits)
      : root_(root), limits_(limits), rules_(limits.max_grammar_elements) {}

  // The GBNF of the whole schema (root ::= ...). INVALID_ARGUMENT naming the keyword and its JSON
  // pointer, or the limit exceeded.
  absl::StatusOr<std::string> Compile();

 private:
  absl::Status Error(absl::string_view pointer, absl::string_view what) const;
  absl::StatusOr<GbnfExpr> Fixed(absl::string_view name);
  GbnfExpr Space() { return GbnfRef("space"); }
  // A new rule `kind`-N ::= body, referred to. The kinds (kv, tail, obj, arr, item, alt, enum,
  // pattern, def-NAME) are apart from the fixed rules' and any-value's names.
  absl::StatusOr<GbnfExpr> NewRule(absl::string_view kind, const GbnfExpr& body);
  absl::StatusOr<GbnfExpr> AnyValue();
  // The non-negative integer `keyword` of `schema`, nullopt when absent.
  absl::StatusOr<std::optional<int64_t>> Count(const Json& schema, absl::string_view keyword,
                                               absl::string_view pointer);

  absl::StatusOr<GbnfExpr> Visit(const Json& schema, const std::string& pointer, int depth);
  // Visits a member's or item's schema: a reference back to a definition being visited is no
  // longer left recursion once an object or array opened.
  absl::StatusOr<GbnfExpr> VisitInside(const Json& schema, const std::string& pointer,
                                       int depth);
  absl::StatusOr<GbnfExpr> Ref(const Json& ref, const std::string& pointer, int depth);
  absl::StatusOr<GbnfExpr> AnyOf(const Json& any_of, const std::string& pointer, int depth);
  absl::StatusOr<GbnfExpr> Enum(const Json& schema, const std::vector<std::string>& types,
                                const std::string& pointer);

  // json_schema_types.cc.
  static bool HasBounds(const Json& schema);
  // An integer within minimum/maximum and their exclusive forms (numbers: integral or not, each
  // within ±(10^16 - 1), the digits of an unbounded integer). Bounds on a number that is not an
  // integer are refused: the grammar of real intervals is not built.
  absl::StatusOr<GbnfExpr> BoundedInteger(const Json& schema, const std::string& pointer);
  absl::StatusOr<GbnfExpr> String(const Json& schema, const std::string& pointer);
  absl::StatusOr<GbnfExpr> Object(const Json& schema, const std::string& pointer, int depth);
  absl::StatusOr<GbnfExpr> Array(const Json& schema, const std::string& pointer, int depth);

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

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_JSON_SCHEMA_COMPILER_H_
