#include "client/loadtest/latency_summary.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace linserve::loadtest {

LatencySummary Summarize(std::vector<double> samples) {
  LatencySummary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  const auto n = static_cast<int64_t>(samples.size());
  auto rank = [&](double percent) {
    const auto r = static_cast<int64_t>(std::ceil(percent / 100.0 * static_cast<double>(n)));
    return samples[static_cast<size_t>(std::clamp<int64_t>(r, 1, n) - 1)];
  };
  summary.count = n;
  summary.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(n);
  summary.p50 = rank(50);
  summary.p90 = rank(90);
  summary.p99 = rank(99);
  summary.max = samples.back();
  return summary;
}

}  // namespace linserve::loadtest
