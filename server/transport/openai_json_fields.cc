#include "server/transport/openai_json_fields.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace linserve {

using nlohmann::json;

absl::Status InvalidField(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

const json* JsonMember(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> JsonNumber(const json& body, const char* name) {
  const json* v = JsonMember(body, name);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return InvalidField(name, "must be a number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return InvalidField(name, "must be finite");
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> JsonInteger(const json& body, const char* name) {
  const json* v = JsonMember(body, name);
  if (v == nullptr) return std::optional<int64_t>();
  // nlohmann parses a non-negative integer as unsigned, and is_number_integer() holds for it
  // too: 2^63 and above must be refused here, not wrapped to a negative by get<int64_t>().
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidField(name, absl::StrCat("must be an integer in [-2^63, 2^63), got ", u));
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  return InvalidField(name, "must be an integer");
}

absl::StatusOr<std::optional<int32_t>> JsonBoundedInteger(const json& body, const char* name,
                                                          int64_t lo, int64_t hi,
                                                          absl::string_view limit) {
  absl::StatusOr<std::optional<int64_t>> v = JsonInteger(body, name);
  if (!v.ok()) return v.status();
  if (!v->has_value()) return std::optional<int32_t>();
  if (**v < lo || **v > hi) {
    return InvalidField(name,
                        absl::StrCat("must be in [", lo, ", ", hi, "]", limit, ", got ", **v));
  }
  return std::optional<int32_t>(static_cast<int32_t>(**v));
}

absl::StatusOr<bool> JsonBool(const json& body, const char* name) {
  const json* v = JsonMember(body, name);
  if (v == nullptr) return false;
  if (!v->is_boolean()) return InvalidField(name, "must be true or false");
  return v->get<bool>();
}

}  // namespace linserve
