// What every benchmark program here needs: wall-clock timing, the median of repeated
// measurements, stopping with the error when a call it depends on fails, and checking its flags'
// values.
#ifndef LINSERVE_BENCH_BENCH_SUPPORT_H_
#define LINSERVE_BENCH_BENCH_SUPPORT_H_

#include <chrono>
#include <cstdint>
#include <string>
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

// The value of flag --`flag` when it lies in [lo, hi]; else prints "<program>: --flag = value is
// not in [lo, hi]" and exits 2.
int32_t FlagInRange(const char* flag, int32_t value, int32_t lo, int32_t hi);

// Flag --`flag`'s comma-separated list of integers, each in [lo, hi]; anything else prints the
// part and the range and exits 2.
std::vector<int64_t> ParseList(const char* flag, const std::string& text, int64_t lo, int64_t hi);

}  // namespace linserve::bench

#endif  // LINSERVE_BENCH_BENCH_SUPPORT_H_
