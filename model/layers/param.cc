#include "model/layers/param.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace linserve {

const ParamValue& ParamValues::Get(std::string_view name) const {
  for (const auto& [key, value] : entries_) {
    if (key == name) return value;
  }
  // A kind asking for a parameter its own table lacks is a bug in that kind, not bad input.
  std::abort();
}

void ParamValues::Set(std::string_view name, ParamValue value) {
  for (auto& [key, old] : entries_) {
    if (key == name) {
      old = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::string(name), std::move(value));
}

ParamSpec IntParam(std::string name, int64_t min, int64_t max, std::string doc,
                   std::string default_from) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.type = ParamType::kInt;
  spec.doc = std::move(doc);
  spec.min = static_cast<double>(min);
  spec.max = static_cast<double>(max);
  spec.default_from = std::move(default_from);
  return spec;
}

ParamSpec EpsilonParam(std::string name, double default_value, std::string doc) {
  return NumberParam(std::move(name), 0, 1, /*min_exclusive=*/true, default_value, std::move(doc));
}

ParamSpec NumberParam(std::string name, double min, double max, bool min_exclusive,
                      double default_value, std::string doc) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.type = ParamType::kNumber;
  spec.doc = std::move(doc);
  spec.min = min;
  spec.max = max;
  spec.min_exclusive = min_exclusive;
  spec.default_value = default_value;
  return spec;
}

ParamSpec BoolParam(std::string name, bool default_value, std::string doc) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.type = ParamType::kBool;
  spec.doc = std::move(doc);
  spec.default_value = default_value;
  return spec;
}

ParamSpec ChoiceParam(std::string name, std::vector<std::string> choices, std::string default_value,
                      std::string doc) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.type = ParamType::kChoice;
  spec.doc = std::move(doc);
  spec.choices = std::move(choices);
  spec.default_value = std::move(default_value);
  return spec;
}

std::string RangeText(const ParamSpec& spec) {
  if (spec.type == ParamType::kInt) {
    return absl::StrCat("[", static_cast<int64_t>(spec.min), ", ", static_cast<int64_t>(spec.max),
                        "]");
  }
  return absl::StrCat(spec.min_exclusive ? "(" : "[", spec.min, ", ", spec.max, "]");
}

std::string DefaultText(const ParamSpec& spec) {
  if (!spec.default_from.empty()) return absl::StrCat("= ", spec.default_from);
  if (!spec.default_value.has_value()) return "required";
  struct Printer {
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return absl::StrCat(v); }
    std::string operator()(bool v) const { return v ? "true" : "false"; }
    std::string operator()(const std::string& v) const { return absl::StrCat("\"", v, "\""); }
  };
  return std::visit(Printer{}, *spec.default_value);
}

std::string_view TypeText(ParamType type) {
  switch (type) {
    case ParamType::kInt:
      return "integer";
    case ParamType::kNumber:
      return "number";
    case ParamType::kBool:
      return "boolean";
    case ParamType::kChoice:
      return "string";
  }
  return "unknown";
}

}  // namespace linserve
