#include "model/layers/component_kind.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace linserve {

std::optional<std::string> CheckStateValue(float value, float max_magnitude) {
  if (!std::isfinite(value)) return absl::StrCat(value, " is not finite");
  if (std::fabs(value) > max_magnitude) {
    return absl::StrCat(value, " exceeds the magnitude bound ", max_magnitude);
  }
  return std::nullopt;
}

}  // namespace linserve
