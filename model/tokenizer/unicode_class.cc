#include "model/tokenizer/unicode_class.h"

#include <algorithm>
#include <iterator>

namespace linserve {
namespace {

struct UnicodeClassRange {
  char32_t first;
  char32_t last;
  UnicodeClass cls;
};

#include "model/tokenizer/unicode_class_table.inc"

// White_Space (PropList.txt), unchanged since Unicode 6.3.
bool IsWhiteSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace

UnicodeClass ClassOf(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return UnicodeClass::kLetter;
    if (cp >= '0' && cp <= '9') return UnicodeClass::kNumber;
    return IsWhiteSpace(cp) ? UnicodeClass::kWhiteSpace : UnicodeClass::kOther;
  }
  if (IsWhiteSpace(cp)) return UnicodeClass::kWhiteSpace;
  // The last range starting at or before cp.
  const auto* it =
      std::upper_bound(std::begin(kUnicodeClassRanges), std::end(kUnicodeClassRanges), cp,
                       [](char32_t c, const UnicodeClassRange& r) { return c < r.first; });
  if (it == std::begin(kUnicodeClassRanges)) return UnicodeClass::kOther;
  --it;
  return cp <= it->last ? it->cls : UnicodeClass::kOther;
}

}  // namespace linserve
