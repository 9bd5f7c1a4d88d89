#include "server/constraints/utf8_ranges.h"

#include <algorithm>

namespace linserve {

int EncodeUtf8(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteRangeSequence>* out) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF};
  for (uint32_t end : kLengthEnds) {
    if (lo <= end && hi > end) {
      SplitUtf8(lo, end, out);
      SplitUtf8(end + 1, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  const int n = EncodeUtf8(lo, a);
  EncodeUtf8(hi, b);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  ByteRangeSequence sequence;
  for (int i = 0; i < n; ++i) sequence.emplace_back(a[i], b[i]);
  out->push_back(std::move(sequence));
}

CodePointRanges NormalizeRanges(CodePointRanges ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  CodePointRanges merged;
  for (const auto& [lo, hi] : ranges) {
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negate) {
    CodePointRanges complement;
    uint32_t next = 0;
    for (const auto& [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.emplace_back(next, kMaxCodePoint);
    merged = std::move(complement);
  }
  CodePointRanges result;
  for (const auto& [lo, hi] : merged) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      result.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) result.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) result.emplace_back(kSurrogateHi + 1, hi);
  }
  return result;
}

}  // namespace linserve
