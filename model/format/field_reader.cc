#include "model/format/field_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/format/json_parse.h"

namespace linserve {

using Json = nlohmann::json;

namespace {

// absl::StrCat takes absl::string_view, which this Abseil does not alias to std::string_view.
absl::string_view A(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

FieldReader::FieldReader(const Json& object, std::string_view source, std::string path)
    : object_(object), source_(source), path_(std::move(path)) {}

absl::Status FieldReader::Error(std::string_view field, std::string_view message) const {
  return absl::InvalidArgumentError(
      absl::StrCat(source_, ": field \"", path_, A(field), "\": ", A(message)));
}

const Json* FieldReader::Find(std::string_view field) {
  consumed_.insert(std::string(field));
  auto it = object_.find(std::string(field));
  return it == object_.end() ? nullptr : &*it;
}

absl::Status FieldReader::Integer(std::string_view field, int64_t min, int64_t max, bool required,
                                  int64_t& out) {
  const Json* value = Find(field);
  const std::string range = absl::StrCat("[", min, ", ", max, "]");
  if (value == nullptr) {
    return required ? Error(field, absl::StrCat("is required (an integer in ", range, ")"))
                    : absl::OkStatus();
  }
  int64_t v = 0;
  if (value->is_number_unsigned()) {
    const uint64_t u = value->get<uint64_t>();
    if (u > static_cast<uint64_t>(max)) return OutOfRange(field, *value, range);
    v = static_cast<int64_t>(u);
  } else if (value->is_number_integer()) {
    v = value->get<int64_t>();
  } else {
    return Error(field,
                 absl::StrCat("must be an integer in ", range, ", got ", DescribeJson(*value)));
  }
  if (v < min || v > max) return OutOfRange(field, *value, range);
  out = v;
  return absl::OkStatus();
}

absl::Status FieldReader::Int(std::string_view field, int64_t min, int64_t max, bool required,
                              int32_t& out) {
  int64_t v = out;
  if (absl::Status s = Integer(field, min, max, required, v); !s.ok()) return s;
  out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status FieldReader::Bool(std::string_view field, bool& out) {
  const Json* value = Find(field);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_boolean()) {
    return Error(field, absl::StrCat("must be true or false, got ", DescribeJson(*value)));
  }
  out = value->get<bool>();
  return absl::OkStatus();
}

absl::Status FieldReader::Number(std::string_view field, const ParamSpec& spec, double& out) {
  const Json* value = Find(field);
  if (value == nullptr) return absl::OkStatus();
  const std::string range = RangeText(spec);
  if (!value->is_number()) {
    return Error(field, absl::StrCat("must be a number in ", range, ", got ", DescribeJson(*value)));
  }
  const double v = value->get<double>();
  const bool above_min = spec.min_exclusive ? v > spec.min : v >= spec.min;
  if (!(above_min && v <= spec.max)) return OutOfRange(field, *value, range);
  out = v;
  return absl::OkStatus();
}

absl::Status FieldReader::Epsilon(std::string_view field, double& out) {
  return Number(field, EpsilonParam(std::string(field), out, ""), out);
}

absl::Status FieldReader::Choice(std::string_view field, const std::vector<std::string>& names,
                                 int& out) {
  const Json* value = Find(field);
  if (value == nullptr) return absl::OkStatus();
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back(absl::StrCat("\"", name, "\""));
  const std::string allowed = absl::StrJoin(quoted, ", ");
  if (value->is_string()) {
    const std::string text = value->get<std::string>();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == text) {
        out = static_cast<int>(i);
        return absl::OkStatus();
      }
    }
  }
  return Error(field, absl::StrCat("must be one of ", allowed, ", got ", DescribeJson(*value)));
}

absl::Status FieldReader::Param(const ParamSpec& spec, ParamValues& values) {
  const bool given = object_.contains(spec.name);
  const bool required = !spec.default_value.has_value() && spec.default_from.empty();
  if (!given && spec.type != ParamType::kInt) {
    consumed_.insert(spec.name);
    if (!spec.default_value.has_value()) {
      return Error(spec.name, absl::StrCat("is required (a ", std::string(TypeText(spec.type)), ")"));
    }
    values.Set(spec.name, *spec.default_value);
    return absl::OkStatus();
  }
  switch (spec.type) {
    case ParamType::kInt: {
      int64_t v = 0;
      if (absl::Status s = Integer(spec.name, static_cast<int64_t>(spec.min),
                                   static_cast<int64_t>(spec.max), required, v);
          !s.ok()) {
        return s;
      }
      if (given) {
        values.Set(spec.name, v);
      } else if (!spec.default_from.empty()) {
        values.Set(spec.name, values.Get(spec.default_from));
      } else {
        values.Set(spec.name, *spec.default_value);
      }
      return absl::OkStatus();
    }
    case ParamType::kNumber: {
      double v = 0;
      if (absl::Status s = Number(spec.name, spec, v); !s.ok()) return s;
      values.Set(spec.name, v);
      return absl::OkStatus();
    }
    case ParamType::kBool: {
      bool v = false;
      if (absl::Status s = Bool(spec.name, v); !s.ok()) return s;
      values.Set(spec.name, v);
      return absl::OkStatus();
    }
    case ParamType::kChoice: {
      int index = 0;
      if (absl::Status s = Choice(spec.name, spec.choices, index); !s.ok()) return s;
      values.Set(spec.name, spec.choices[static_cast<size_t>(index)]);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

absl::Status FieldReader::RejectUnknown() const {
  std::vector<std::string> unknown;
  for (const auto& [key, value] : object_.items()) {
    if (consumed_.count(key) == 0) unknown.push_back(absl::StrCat("\"", path_, key, "\""));
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      source_, ": unknown field", unknown.size() > 1 ? "s " : " ", absl::StrJoin(unknown, ", ")));
}

absl::Status FieldReader::OutOfRange(std::string_view field, const Json& value,
                                     std::string_view range) const {
  return Error(field, absl::StrCat("must be in ", A(range), ", got ", value.dump()));
}

}  // namespace linserve
