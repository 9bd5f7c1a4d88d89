// Distribution: a seeded source of non-negative integers (prompt and output lengths in tokens,
// think times in milliseconds) parsed from a short spec such as "uniform:16:64".
#ifndef LINSERVE_CLIENT_LOADTEST_DISTRIBUTION_H_
#define LINSERVE_CLIENT_LOADTEST_DISTRIBUTION_H_

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace linserve::loadtest {

// A uniform double in [0, 1) from one draw, computed by hand so that a seed gives the same
// workload with every standard library (std:: distributions differ between them).
double UniformUnit(std::mt19937_64& rng);

class Distribution {
 public:
  enum class Kind { kFixed, kUniform, kNormal };

  // Specs: "N" or "fixed:N"; "uniform:A:B" (integers, A <= B, both ends included);
  // "normal:MEAN:SD" (rounded to the nearest integer, then clamped to [min_value, max_value]).
  // Every value a spec can produce must lie in [min_value, max_value]; errors are
  // INVALID_ARGUMENT and name `flag`, the spec and the allowed range.
  static absl::StatusOr<Distribution> Parse(absl::string_view spec, absl::string_view flag,
                                            int64_t min_value, int64_t max_value);
  static Distribution Fixed(int64_t value);

  int64_t Sample(std::mt19937_64& rng) const;
  // The largest value Sample can return.
  int64_t max() const;
  // The spec in canonical form ("fixed:8", "uniform:4:16", "normal:32:8").
  std::string ToString() const;
  Kind kind() const { return kind_; }

 private:
  Distribution(Kind kind, double a, double b, int64_t min_value, int64_t max_value)
      : kind_(kind), a_(a), b_(b), min_value_(min_value), max_value_(max_value) {}

  Kind kind_;
  // fixed: a = value; uniform: [a, b]; normal: mean a, standard deviation b.
  double a_;
  double b_;
  int64_t min_value_;
  int64_t max_value_;
};

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_DISTRIBUTION_H_
