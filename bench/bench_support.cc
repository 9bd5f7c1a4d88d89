#include "bench/bench_support.h"

#include <errno.h>  // program_invocation_short_name (GNU)

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

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

int32_t FlagInRange(const char* flag, int32_t value, int32_t lo, int32_t hi) {
  if (value < lo || value > hi) {
    std::fprintf(stderr, "%s: --%s = %d is not in [%d, %d]\n", program_invocation_short_name, flag,
                 value, lo, hi);
    std::exit(2);
  }
  return value;
}

std::vector<int64_t> ParseList(const char* flag, const std::string& text, int64_t lo, int64_t hi) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < lo || v > hi) {
      std::fprintf(stderr, "%s: --%s: '%s' is not an integer in [%lld, %lld]\n",
                   program_invocation_short_name, flag, std::string(part).c_str(),
                   static_cast<long long>(lo), static_cast<long long>(hi));
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace linserve::bench
