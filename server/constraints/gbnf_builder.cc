#include "server/constraints/gbnf_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/constraints/utf8_ranges.h"

namespace linserve {
namespace {

// A code point as GBNF writes it outside the printable ASCII it may write as itself.
std::string Escaped(uint32_t c) {
  if (c < 0x80) return absl::StrFormat("\\x%02X", c);
  if (c <= 0xFFFF) return absl::StrFormat("\\u%04X", c);
  return absl::StrFormat("\\U%08X", c);
}

std::string InLiteral(uint32_t c) {
  if (c == '"' || c == '\\') return std::string({'\\', static_cast<char>(c)});
  if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
  return Escaped(c);
}

std::string InClass(uint32_t c) {
  if (c >= 0x20 && c < 0x7F && c != ']' && c != '[' && c != '\\' && c != '^' && c != '-') {
    return std::string(1, static_cast<char>(c));
  }
  return Escaped(c);
}

// Elements ParseGbnf makes of the code points lo..hi spelled as UTF-8 byte ranges: one for the
// ASCII part, about three sequences of `length` byte sets for each UTF-8 length the rest spans.
int64_t RangeElements(uint32_t lo, uint32_t hi) {
  int64_t elements = 0;
  if (lo < 0x80) elements += 1;
  const struct {
    uint32_t lo, hi;
    int64_t length;
  } bands[] = {{0x80, 0x7FF, 2}, {0x800, 0xFFFF, 3}, {0x10000, kMaxCodePoint, 4}};
  for (const auto& band : bands) {
    if (lo <= band.hi && hi >= band.lo) elements += 3 * band.length;
  }
  return elements;
}

// Decodes one UTF-8 character of `s` at `*i` (advancing it); an invalid byte reads as itself.
uint32_t DecodeUtf8(absl::string_view s, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(*i);
  int length = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || *i + length > s.size()) {
    ++*i;
    return b0;
  }
  uint32_t c = length == 1 ? b0 : b0 & (0x7F >> length);
  for (int k = 1; k < length; ++k) {
    if ((byte(*i + k) & 0xC0) != 0x80) {
      ++*i;
      return b0;
    }
    c = (c << 6) | (byte(*i + k) & 0x3F);
  }
  *i += length;
  return c;
}

}  // namespace

int64_t SaturatingAdd(int64_t a, int64_t b) { return std::min(kGbnfElementsCap, a + b); }

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  if (a >= kGbnfElementsCap / b) return kGbnfElementsCap;
  return a * b;
}

GbnfExpr GbnfLiteral(absl::string_view utf8) {
  GbnfExpr e;
  e.text.push_back('"');
  for (size_t i = 0; i < utf8.size();) e.text += InLiteral(DecodeUtf8(utf8, &i));
  e.text += "\"";
  e.elements = static_cast<int64_t>(utf8.size());
  return e;
}

GbnfExpr GbnfRef(absl::string_view name) { return GbnfExpr{std::string(name), 1, true}; }

CodePointSet CodePointSet::Range(uint32_t lo, uint32_t hi) { return FromRanges({{lo, hi}}); }

CodePointSet CodePointSet::FromRanges(std::vector<std::pair<uint32_t, uint32_t>> ranges) {
  CodePointSet set;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    // Surrogates are not characters: split around them.
    if (lo <= kSurrogateHi && hi >= kSurrogateLo) {
      if (lo < kSurrogateLo) set.ranges_.emplace_back(lo, kSurrogateLo - 1);
      if (hi > kSurrogateHi) set.ranges_.emplace_back(kSurrogateHi + 1, hi);
    } else {
      set.ranges_.emplace_back(lo, hi);
    }
  }
  std::sort(set.ranges_.begin(), set.ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : set.ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  set.ranges_ = std::move(merged);
  return set;
}

CodePointSet CodePointSet::Complement() const {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges_) {
    if (lo > next) ranges.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) ranges.emplace_back(next, kMaxCodePoint);
  return FromRanges(std::move(ranges));
}

CodePointSet CodePointSet::Intersect(const CodePointSet& other) const {
  // Both lists are sorted and disjoint: one merge pass.
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  size_t i = 0, j = 0;
  while (i < ranges_.size() && j < other.ranges_.size()) {
    const auto& a = ranges_[i];
    const auto& b = other.ranges_[j];
    const uint32_t lo = std::max(a.first, b.first);
    const uint32_t hi = std::min(a.second, b.second);
    if (lo <= hi) ranges.emplace_back(lo, hi);
    if (a.second < b.second) {
      ++i;
    } else {
      ++j;
    }
  }
  return FromRanges(std::move(ranges));
}

GbnfExpr GbnfChars(const CodePointSet& set) {
  GbnfExpr e;
  if (set.IsSingle()) {
    const uint32_t c = set.ranges()[0].first;
    e.text = absl::StrCat("\"", InLiteral(c), "\"");
    e.elements = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    return e;
  }
  e.text.push_back('[');
  for (const auto& [lo, hi] : set.ranges()) {
    e.text += InClass(lo);
    if (hi != lo) absl::StrAppend(&e.text, hi == lo + 1 ? "" : "-", InClass(hi));
    e.elements = SaturatingAdd(e.elements, RangeElements(lo, hi));
  }
  e.text += "]";
  return e;
}

CodePointSet JsonUnescapedChars() {
  return CodePointSet::FromRanges(
      {{0x20, '"' - 1}, {'"' + 1, '\\' - 1}, {'\\' + 1, 0x7E}, {0x80, kMaxCodePoint}});
}

GbnfExpr GbnfSeq(const std::vector<GbnfExpr>& parts) {
  GbnfExpr e;
  int nonempty = 0;
  for (const GbnfExpr& part : parts) {
    if (part.text.empty()) continue;
    if (!e.text.empty()) e.text += ' ';
    e.text += part.text;
    e.elements = SaturatingAdd(e.elements, part.elements);
    e.atomic = part.atomic;
    ++nonempty;
  }
  if (nonempty > 1) e.atomic = false;
  return e;
}

GbnfExpr GbnfAlt(const std::vector<GbnfExpr>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  GbnfExpr e;
  e.text.push_back('(');
  for (size_t i = 0; i < alternatives.size(); ++i) {
    if (i > 0) e.text += " | ";
    e.text += alternatives[i].text;
    e.elements = SaturatingAdd(e.elements, SaturatingAdd(alternatives[i].elements, 1));
  }
  e.text += ")";
  return e;
}

GbnfExpr GbnfRepeat(const GbnfExpr& e, int64_t min, int64_t max) {
  GbnfExpr r;
  r.text = e.atomic ? e.text : absl::StrCat("(", e.text, ")");
  if (min == 0 && max == 1) {
    r.text += "?";
    r.elements = SaturatingAdd(e.elements, 2);
  } else if (max < 0) {
    absl::StrAppend(&r.text, min == 0 ? "*" : min == 1 ? "+" : absl::StrCat("{", min, ",}"));
    r.elements = SaturatingAdd(SaturatingMul(e.elements, SaturatingAdd(min, 1)), 2);
  } else {
    absl::StrAppend(&r.text, min == max ? absl::StrCat("{", min, "}")
                                        : absl::StrCat("{", min, ",", max, "}"));
    r.elements = SaturatingAdd(SaturatingMul(e.elements, std::max<int64_t>(max, 1)),
                               SaturatingMul(2, max - min));
  }
  r.atomic = false;
  return r;
}

absl::Status GbnfRules::Check(int64_t elements) const {
  if (SaturatingAdd(elements_, elements) > max_elements_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the grammar would exceed max_grammar_elements (", max_elements_, ")"));
  }
  return absl::OkStatus();
}

absl::Status GbnfRules::Add(absl::string_view name, const GbnfExpr& body) {
  return AddText(absl::StrCat(name, " ::= ", body.text, "\n"), body.elements);
}

absl::Status GbnfRules::AddText(absl::string_view rules, int64_t elements) {
  if (absl::Status status = Check(elements); !status.ok()) return status;
  elements_ = SaturatingAdd(elements_, elements);
  absl::StrAppend(&text_, rules);
  return absl::OkStatus();
}

}  // namespace linserve
