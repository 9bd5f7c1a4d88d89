#include "model/layers/component_kind.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace linserve {

std::optional<std::string> CheckStateValue(float value, float max_magnitude) {
  if (!std::isfinite(value)) return absl::StrCat(value, " is not finite");
  if (std::fabs(value) > max_magnitude) {
    return absl::StrCat(value, " exceeds the magnitude bound ", max_magnitude);
  }
  return std::nullopt;
}

std::optional<StateProblem> CheckStateValues(absl::Span<const float> slice, float max_magnitude) {
  for (size_t i = 0; i < slice.size(); ++i) {
    if (std::optional<std::string> bad = CheckStateValue(slice[i], max_magnitude)) {
      return StateProblem{static_cast<int64_t>(i), *std::move(bad)};
    }
  }
  return std::nullopt;
}

}  // namespace linserve
