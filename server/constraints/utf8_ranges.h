// Code-point ranges and their UTF-8 byte ranges: what ParseGbnf lowers a literal or a class to.
// A class's code points become a few sequences of byte ranges whose products are exactly the
// UTF-8 encodings of those code points (surrogates excluded), so a byte-level grammar accepts
// valid UTF-8 only.
#ifndef LINSERVE_SERVER_CONSTRAINTS_UTF8_RANGES_H_
#define LINSERVE_SERVER_CONSTRAINTS_UTF8_RANGES_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace linserve {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
inline constexpr uint32_t kSurrogateLo = 0xD800;
inline constexpr uint32_t kSurrogateHi = 0xDFFF;

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted

// A sequence of byte ranges: the UTF-8 encodings of one code-point range.
using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Writes the UTF-8 encoding of `cp` (at most kMaxCodePoint) to `out`; returns its length.
int EncodeUtf8(uint32_t cp, uint8_t out[4]);

// Splits [lo, hi] (no surrogates inside) into ranges whose UTF-8 encodings are exactly the
// products of per-byte ranges (the classic construction of RE2 and Rust's utf8-ranges), appended
// to `out`.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteRangeSequence>* out);

// Sorted, merged, without surrogates; negated over every Unicode scalar value when `negate`.
CodePointRanges NormalizeRanges(CodePointRanges ranges, bool negate);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_UTF8_RANGES_H_
