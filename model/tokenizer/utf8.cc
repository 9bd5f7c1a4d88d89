#include "model/tokenizer/utf8.h"

#include <cstdint>

namespace linserve {
namespace {

enum class Scan { kComplete, kTruncated, kIllFormed };

// Examines the character starting at text[i]. Sets `length` to its byte count when complete,
// to the bytes that form a valid prefix when truncated, and to the maximal ill-formed subpart
// (at least 1) when ill-formed.
Scan ScanCharacter(std::string_view text, size_t i, size_t& length) {
  const uint8_t lead = static_cast<uint8_t>(text[i]);
  if (lead < 0x80) {
    length = 1;
    return Scan::kComplete;
  }
  size_t needed;
  uint8_t second_lo = 0x80, second_hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
    if (lead == 0xE0) second_lo = 0xA0;  // no overlongs
    if (lead == 0xED) second_hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
    if (lead == 0xF0) second_lo = 0x90;  // no overlongs
    if (lead == 0xF4) second_hi = 0x8F;  // nothing above U+10FFFF
  } else {
    length = 1;  // a continuation byte, C0, C1 or F5..FF can never start a character
    return Scan::kIllFormed;
  }
  for (size_t k = 1; k < needed; ++k) {
    if (i + k >= text.size()) {
      length = k;
      return Scan::kTruncated;
    }
    const uint8_t b = static_cast<uint8_t>(text[i + k]);
    const uint8_t lo = k == 1 ? second_lo : 0x80;
    const uint8_t hi = k == 1 ? second_hi : 0xBF;
    if (b < lo || b > hi) {
      length = k;
      return Scan::kIllFormed;
    }
  }
  length = needed;
  return Scan::kComplete;
}

}  // namespace

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t length;
    if (ScanCharacter(text, i, length) != Scan::kComplete) return i;
    i += length;
  }
  return std::nullopt;
}

size_t AppendRepairedUtf8(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t length;
    switch (ScanCharacter(bytes, i, length)) {
      case Scan::kComplete:
        out.append(bytes.substr(i, length));
        break;
      case Scan::kTruncated:
        if (!final) return i;
        out.append(kReplacementCharacter);
        break;
      case Scan::kIllFormed:
        out.append(kReplacementCharacter);
        break;
    }
    i += length;
  }
  return i;
}

}  // namespace linserve
