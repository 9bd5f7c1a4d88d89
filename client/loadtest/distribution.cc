#include "client/loadtest/distribution.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace linserve::loadtest {
namespace {

absl::Status SpecError(absl::string_view flag, absl::string_view spec, absl::string_view why,
                       int64_t min_value, int64_t max_value) {
  return absl::InvalidArgumentError(absl::StrCat(
      flag, "=", spec, ": ", why, " (specs: N, fixed:N, uniform:A:B, normal:MEAN:SD; values in [",
      min_value, ", ", max_value, "])"));
}

}  // namespace

double UniformUnit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1p-53; }

absl::StatusOr<Distribution> Distribution::Parse(absl::string_view spec, absl::string_view flag,
                                                 int64_t min_value, int64_t max_value) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  auto integer = [&](absl::string_view text, int64_t& out) {
    return absl::SimpleAtoi(text, &out) && out >= min_value && out <= max_value;
  };
  absl::string_view kind = parts[0];
  if (parts.size() == 1) kind = "fixed";
  const std::vector<absl::string_view> args(parts.begin() + (parts.size() == 1 ? 0 : 1),
                                           parts.end());
  if (kind == "fixed") {
    int64_t value = 0;
    if (args.size() != 1 || !integer(args[0], value)) {
      return SpecError(flag, spec, "expected one integer in range", min_value, max_value);
    }
    return Distribution(Kind::kFixed, static_cast<double>(value), 0, min_value, max_value);
  }
  if (kind == "uniform") {
    int64_t lo = 0;
    int64_t hi = 0;
    if (args.size() != 2 || !integer(args[0], lo) || !integer(args[1], hi) || lo > hi) {
      return SpecError(flag, spec, "expected two integers A <= B in range", min_value,
                       max_value);
    }
    return Distribution(Kind::kUniform, static_cast<double>(lo), static_cast<double>(hi),
                        min_value, max_value);
  }
  if (kind == "normal") {
    double mean = 0;
    double sd = 0;
    if (args.size() != 2 || !absl::SimpleAtod(args[0], &mean) ||
        !absl::SimpleAtod(args[1], &sd) || !std::isfinite(mean) || !std::isfinite(sd) ||
        sd < 0 || mean < static_cast<double>(min_value) ||
        mean > static_cast<double>(max_value)) {
      return SpecError(flag, spec, "expected a MEAN in range and a finite SD >= 0", min_value,
                       max_value);
    }
    return Distribution(Kind::kNormal, mean, sd, min_value, max_value);
  }
  return SpecError(flag, spec, absl::StrCat("unknown distribution \"", kind, "\""), min_value,
                   max_value);
}

Distribution Distribution::Fixed(int64_t value) {
  return Distribution(Kind::kFixed, static_cast<double>(value), 0, value, value);
}

int64_t Distribution::Sample(std::mt19937_64& rng) const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int64_t>(a_);
    case Kind::kUniform: {
      const double span = b_ - a_ + 1;
      const auto offset = static_cast<int64_t>(UniformUnit(rng) * span);
      return static_cast<int64_t>(a_) + std::min(offset, static_cast<int64_t>(span) - 1);
    }
    case Kind::kNormal: {
      // Box-Muller with u1 in (0, 1] so the logarithm is finite.
      const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1p-53;
      const double u2 = UniformUnit(rng);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
      const double value = std::round(a_ + b_ * z);
      return static_cast<int64_t>(std::clamp(value, static_cast<double>(min_value_),
                                             static_cast<double>(max_value_)));
    }
  }
  return min_value_;
}

int64_t Distribution::max() const {
  switch (kind_) {
    case Kind::kFixed:
      return static_cast<int64_t>(a_);
    case Kind::kUniform:
      return static_cast<int64_t>(b_);
    case Kind::kNormal:
      return b_ == 0 ? static_cast<int64_t>(std::round(a_)) : max_value_;
  }
  return max_value_;
}

std::string Distribution::ToString() const {
  switch (kind_) {
    case Kind::kFixed:
      return absl::StrCat("fixed:", static_cast<int64_t>(a_));
    case Kind::kUniform:
      return absl::StrCat("uniform:", static_cast<int64_t>(a_), ":", static_cast<int64_t>(b_));
    case Kind::kNormal:
      return absl::StrCat("normal:", a_, ":", b_);
  }
  return "";
}

}  // namespace linserve::loadtest
