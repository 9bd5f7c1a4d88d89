#include "server/transport/chunked_body_meter.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace linserve {
namespace {

// Longest size or trailer line looked at (evhttp's own bound on a header line is larger; a
// chunk-size line is a number and some extensions).
constexpr size_t kMaxLineBytes = 4096;
// Hexadecimal digits of the largest chunk size kept exactly (2^60 - 1): more is too large.
constexpr size_t kMaxSizeDigits = 15;

}  // namespace

ChunkedBodyMeter::Verdict ChunkedBodyMeter::Feed(absl::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size() && verdict_ == Verdict::kMore) {
    switch (phase_) {
      case Phase::kSizeLine:
      case Phase::kTrailers: {
        const size_t newline = bytes.find('\n', i);
        const size_t end = newline == absl::string_view::npos ? bytes.size() : newline;
        if (line_.size() + (end - i) > kMaxLineBytes) {
          verdict_ = Verdict::kMalformed;
          break;
        }
        line_.append(bytes.data() + i, end - i);
        i = end;
        if (newline == absl::string_view::npos) break;
        ++i;
        if (!line_.empty() && line_.back() == '\r') line_.pop_back();
        if (phase_ == Phase::kSizeLine) {
          SizeLine();
        } else if (line_.empty()) {
          verdict_ = Verdict::kComplete;
          left_over_ = bytes.size() - i;
        }
        line_.clear();
        break;
      }
      case Phase::kData: {
        const int64_t take = std::min<int64_t>(remaining_, static_cast<int64_t>(bytes.size() - i));
        remaining_ -= take;
        i += static_cast<size_t>(take);
        if (remaining_ == 0) phase_ = Phase::kDataEnd;
        break;
      }
      case Phase::kDataEnd: {
        // "\r\n" or "\n" after a chunk's data.
        const char c = bytes[i++];
        if (c == '\n') {
          phase_ = Phase::kSizeLine;
        } else if (c != '\r') {
          verdict_ = Verdict::kMalformed;
        }
        break;
      }
    }
  }
  return verdict_;
}

void ChunkedBodyMeter::SizeLine() {
  const absl::string_view line = absl::StripLeadingAsciiWhitespace(line_);
  size_t digits = 0;
  size_t significant = 0;  // digits from the first non-zero one
  int64_t size = 0;
  while (digits < line.size() && absl::ascii_isxdigit(static_cast<unsigned char>(line[digits]))) {
    const char c = absl::ascii_tolower(static_cast<unsigned char>(line[digits]));
    ++digits;
    if (significant == 0 && c == '0') continue;
    if (++significant > kMaxSizeDigits) {
      verdict_ = Verdict::kTooLarge;
      return;
    }
    size = size * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
  }
  const absl::string_view after = line.substr(digits);
  if (digits == 0 ||
      !(after.empty() || after[0] == ';' ||
        absl::ascii_isspace(static_cast<unsigned char>(after[0])))) {
    verdict_ = Verdict::kMalformed;
    return;
  }
  total_ += size;
  if (total_ > limit_) {
    verdict_ = Verdict::kTooLarge;
    return;
  }
  if (size == 0) {
    phase_ = Phase::kTrailers;
  } else {
    phase_ = Phase::kData;
    remaining_ = size;
  }
}

}  // namespace linserve
