// What every benchmark program here needs: wall-clock timing, the median of repeated
// measurements, and stopping with the error when a call it depends on fails.
#ifndef LINSERVE_BENCH_BENCH_SUPPORT_H_
#define LINSERVE_BENCH_BENCH_SUPPORT_H_

#include <chrono>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace linserve::bench {

using Clock = std::chrono::steady_clock;

// Seconds since `start`.
double Seconds(Clock::time_point start);

// The middle element of `values` (the upper one of an even count); `values` must not be empty.
double Median(std::vector<double> values);

// A benchmark cannot go on after a failed call: prints "<program>: <status>" and exits 1.
void Must(const absl::Status& status);

template <class T>
T Must(absl::StatusOr<T> value) {
  Must(value.status());
  return *std::move(value);
}

}  // namespace linserve::bench

#endif  // LINSERVE_BENCH_BENCH_SUPPORT_H_
