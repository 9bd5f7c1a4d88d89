#include "bench/bench_support.h"

#include <errno.h>  // program_invocation_short_name (GNU)

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace linserve::bench {

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Must(const absl::Status& status) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, status.ToString().c_str());
  std::exit(1);
}

}  // namespace linserve::bench
