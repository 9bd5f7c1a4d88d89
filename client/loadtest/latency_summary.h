// LatencySummary: order statistics of a set of latency samples, in the units they were given.
#ifndef LINSERVE_CLIENT_LOADTEST_LATENCY_SUMMARY_H_
#define LINSERVE_CLIENT_LOADTEST_LATENCY_SUMMARY_H_

#include <cstdint>
#include <vector>

namespace linserve::loadtest {

struct LatencySummary {
  int64_t count = 0;
  // All zero when count is 0.
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

// Percentiles by the nearest-rank method: the smallest sample with at least p% of the samples
// at or below it, so every figure is a latency that was actually observed.
LatencySummary Summarize(std::vector<double> samples);

}  // namespace linserve::loadtest

#endif  // LINSERVE_CLIENT_LOADTEST_LATENCY_SUMMARY_H_
