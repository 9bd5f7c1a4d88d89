#include "server/constraints/integer_range_grammar.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace linserve {
namespace {

// 10^kMaxIntegerDigits - 1: the largest magnitude an integer without a bound may have.
constexpr int64_t kLargest = 9'999'999'999'999'999;

std::string DigitClass(char from, char to) {
  if (from == to) return absl::StrCat("\"", std::string(1, from), "\"");
  if (from == '0' && to == '9') return "[0-9]";
  return absl::StrCat("[", std::string(1, from), "-", std::string(1, to), "]");
}

std::string AnyDigits(size_t n) {
  if (n == 0) return "";
  if (n == 1) return "[0-9]";
  return absl::StrCat("[0-9]{", n, "}");
}

// Alternatives matching exactly the digit strings of a's length from a to b (a <= b, same
// length; leading zeros are the caller's concern), appended to `out` each as a sequence.
void SameLength(const std::string& a, const std::string& b, const std::string& prefix,
                std::vector<std::string>& out) {
  const size_t n = a.size();
  if (n == 0) {
    out.push_back(prefix.empty() ? "\"\"" : prefix);
    return;
  }
  const std::string rest_a = a.substr(1), rest_b = b.substr(1);
  const auto join = [](const std::string& x, const std::string& y) {
    return x.empty() ? y : (y.empty() ? x : absl::StrCat(x, " ", y));
  };
  if (a[0] == b[0]) {
    SameLength(rest_a, rest_b, join(prefix, DigitClass(a[0], a[0])), out);
    return;
  }
  const bool a_rest_min = rest_a == std::string(n - 1, '0');
  const bool b_rest_max = rest_b == std::string(n - 1, '9');
  // First digit a[0] with the rest from rest_a up, unless rest_a is all zeros (joins the middle).
  char middle_from = a[0], middle_to = b[0];
  if (!a_rest_min) {
    SameLength(rest_a, std::string(n - 1, '9'), join(prefix, DigitClass(a[0], a[0])), out);
    ++middle_from;
  }
  if (!b_rest_max) --middle_to;
  if (middle_from <= middle_to) {
    out.push_back(join(join(prefix, DigitClass(middle_from, middle_to)), AnyDigits(n - 1)));
  }
  if (!b_rest_max) {
    SameLength(std::string(n - 1, '0'), rest_b, join(prefix, DigitClass(b[0], b[0])), out);
  }
}

// Alternatives for the non-negative integers in [lo, hi] (0 <= lo <= hi), without leading zeros.
void NonNegative(int64_t lo, int64_t hi, const std::string& prefix,
                 std::vector<std::string>& out) {
  int64_t low = lo;
  for (size_t digits = absl::StrCat(lo).size(); low <= hi; ++digits) {
    // The numbers of `digits` digits: [10^(digits-1), 10^digits - 1] (0 for one digit too).
    int64_t top = 9;
    for (size_t i = 1; i < digits; ++i) top = top * 10 + 9;
    const int64_t high = std::min(hi, top);
    const std::string a = absl::StrCat(low), b = absl::StrCat(high);
    SameLength(a, b, prefix, out);
    if (high == hi) break;
    low = high + 1;
  }
}

}  // namespace

std::string IntegerRangeGbnf(std::optional<int64_t> min, std::optional<int64_t> max) {
  const int64_t lo = min.value_or(-kLargest);
  const int64_t hi = max.value_or(kLargest);
  std::vector<std::string> alternatives;
  // Negative numbers: "-" then the magnitudes in [max(1, -hi), -lo].
  if (lo < 0) NonNegative(std::max<int64_t>(1, -hi), -lo, "\"-\"", alternatives);
  if (hi >= 0) NonNegative(std::max<int64_t>(0, lo), hi, "", alternatives);
  return absl::StrCat("(", absl::StrJoin(alternatives, " | "), ")");
}

}  // namespace linserve
