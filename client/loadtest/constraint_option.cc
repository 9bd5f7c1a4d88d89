#include "client/loadtest/constraint_option.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace linserve::loadtest {
namespace {

absl::StatusOr<std::string> ReadFile(absl::string_view value, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in.is_open() || in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--constraint=", value, ": cannot read \"", path, "\""));
  }
  return contents.str();
}

}  // namespace

absl::StatusOr<v1::Constraint> ParseConstraintOption(absl::string_view value) {
  v1::Constraint constraint;
  absl::string_view rest = value;
  if (value == "json_object") {
    constraint.mutable_json_object();
  } else if (absl::ConsumePrefix(&rest, "json_schema:") && !rest.empty()) {
    absl::StatusOr<std::string> schema = ReadFile(value, std::string(rest));
    if (!schema.ok()) return schema.status();
    constraint.set_json_schema(*schema);
  } else if (absl::ConsumePrefix(&rest, "regex:") && !rest.empty()) {
    constraint.set_regex(std::string(rest));
  } else if (absl::ConsumePrefix(&rest, "grammar:") && !rest.empty()) {
    absl::StatusOr<std::string> grammar = ReadFile(value, std::string(rest));
    if (!grammar.ok()) return grammar.status();
    constraint.set_grammar(*grammar);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--constraint=", value,
                     ": expected json_object, json_schema:FILE, regex:PATTERN or grammar:FILE"));
  }
  return constraint;
}

}  // namespace linserve::loadtest
