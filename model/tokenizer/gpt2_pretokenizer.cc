#include "model/tokenizer/gpt2_pretokenizer.h"

#include <cstdint>

#include "model/tokenizer/unicode_class.h"

namespace linserve {
namespace {

struct Character {
  UnicodeClass cls;
  size_t length;  // bytes
};

// The character of well-formed UTF-8 `text` starting at byte i.
Character CharacterAt(std::string_view text, size_t i) {
  const uint8_t lead = static_cast<uint8_t>(text[i]);
  size_t length = 1;
  char32_t cp = lead;
  if (lead >= 0xF0) {
    length = 4;
    cp = lead & 0x07;
  } else if (lead >= 0xE0) {
    length = 3;
    cp = lead & 0x0F;
  } else if (lead >= 0xC0) {
    length = 2;
    cp = lead & 0x1F;
  }
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[i + k]) & 0x3F);
  return {ClassOf(cp), length};
}

}  // namespace

size_t Gpt2PieceEnd(std::string_view text, size_t begin) {
  const size_t n = text.size();
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive)
  if (text[begin] == '\'' && begin + 1 < n) {
    const char c = text[begin + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return begin + 2;
    if (begin + 2 < n) {
      const std::string_view two = text.substr(begin + 1, 2);
      if (two == "re" || two == "ve" || two == "ll") return begin + 3;
    }
  }
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+ : an optional space, then a run of one class.
  const size_t first = begin + (text[begin] == ' ' ? 1 : 0);
  if (first < n) {
    const Character c = CharacterAt(text, first);
    if (c.cls != UnicodeClass::kWhiteSpace) {
      size_t end = first + c.length;
      while (end < n) {
        const Character next = CharacterAt(text, end);
        if (next.cls != c.cls) break;
        end += next.length;
      }
      return end;
    }
  }
  // \s+(?!\S) | \s+ : a run of white space; before a non-space, all but its last character
  // (which then leads the next piece), unless the run is that one character.
  size_t end = begin;
  size_t last = begin;
  size_t count = 0;
  while (end < n) {
    const Character c = CharacterAt(text, end);
    if (c.cls != UnicodeClass::kWhiteSpace) break;
    last = end;
    end += c.length;
    ++count;
  }
  return end == n || count == 1 ? end : last;
}

}  // namespace linserve
