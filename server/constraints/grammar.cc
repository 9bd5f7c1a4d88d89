#include "server/constraints/grammar.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "server/constraints/grammar_builder.h"
#include "server/constraints/utf8_ranges.h"

namespace linserve {
namespace {

// Repetition counts above this are refused before any arithmetic on them.
constexpr int64_t kMaxRepetitionCount = 1'000'000'000;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads GBNF into a GrammarBuilder; the checks and the flattening happen in its Finish.
class GbnfParser {
 public:
  GbnfParser(std::string_view text, const ConstraintLimits& limits)
      : text_(text), limits_(limits), builder_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace(true);
    while (pos_ < text_.size()) {
      if (auto status = ParseRule(); !status.ok()) return status;
    }
    return builder_.Finish(text_.size());
  }

 private:
  using Kind = GrammarBuilder::Kind;
  using Elem = GrammarBuilder::Elem;
  using Sequence = GrammarBuilder::Sequence;

  absl::Status Count(int64_t elements) { return builder_.Count(elements, pos_); }

  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtEnd() const { return pos_ >= text_.size(); }

  void SkipSpace(bool newline_ok) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\r' && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  absl::Status ParseRule() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    if (pos_ == start) return GbnfError(pos_, "expected a rule name");
    const std::string_view name = text_.substr(start, pos_ - start);
    const int32_t rule = builder_.UserRule(name, start);
    if (auto status = builder_.Define(rule, start); !status.ok()) return status;
    owner_ = rule;
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return GbnfError(pos_, "expected '::='");
    pos_ += 3;
    SkipSpace(true);
    if (auto status = ParseAlternatives(rule, false); !status.ok()) return status;
    if (Peek() == '\r') {
      pos_ += Peek(1) == '\n' ? 2 : 1;
    } else if (Peek() == '\n') {
      ++pos_;
    } else if (!AtEnd()) {
      return GbnfError(pos_, absl::StrCat("expected a newline or the end, got '",
                                          std::string(text_.substr(pos_, 1)), "'"));
    }
    SkipSpace(true);
    return absl::OkStatus();
  }

  absl::Status ParseAlternatives(int32_t rule, bool nested) {
    while (true) {
      Sequence sequence;
      if (auto status = ParseSequence(nested, &sequence); !status.ok()) return status;
      builder_.alternatives(rule).push_back(std::move(sequence));
      if (Peek() != '|') return absl::OkStatus();
      ++pos_;
      SkipSpace(true);
    }
  }

  absl::Status ParseSequence(bool nested, Sequence* sequence) {
    size_t item_start = sequence->size();
    bool have_item = false;
    while (!AtEnd()) {
      const char c = Peek();
      const size_t offset = pos_;
      if (c == '"') {
        ++pos_;
        item_start = sequence->size();
        have_item = true;
        while (true) {
          if (AtEnd()) return GbnfError(offset, "unterminated literal");
          if (Peek() == '"') break;
          uint32_t cp = 0;
          if (auto status = ParseChar(&cp); !status.ok()) return status;
          if (cp >= kSurrogateLo && cp <= kSurrogateHi) {
            return GbnfError(pos_, "a surrogate code point is not a character");
          }
          uint8_t bytes[4];
          const int n = EncodeUtf8(cp, bytes);
          if (auto status = Count(n); !status.ok()) return status;
          for (int i = 0; i < n; ++i) {
            ByteSet set;
            set.Add(bytes[i]);
            sequence->push_back({Kind::kBytes, builder_.InternByteSet(set)});
          }
        }
        ++pos_;
      } else if (c == '[' || c == '.') {
        CodePointRanges ranges;
        bool negate = false;
        if (c == '.') {
          ++pos_;
          ranges.emplace_back(0, kMaxCodePoint);
        } else if (auto status = ParseClass(&ranges, &negate); !status.ok()) {
          return status;
        }
        item_start = sequence->size();
        have_item = true;
        auto element =
            builder_.LowerClass(NormalizeRanges(std::move(ranges), negate), owner_, pos_);
        if (!element.ok()) return element.status();
        sequence->push_back(*element);
      } else if (IsNameChar(c)) {
        while (!AtEnd() && IsNameChar(Peek())) ++pos_;
        if (auto status = Count(1); !status.ok()) return status;
        item_start = sequence->size();
        have_item = true;
        sequence->push_back(
            {Kind::kRule, builder_.UserRule(text_.substr(offset, pos_ - offset), offset)});
      } else if (c == '(') {
        if (++depth_ > limits_.max_nesting_depth) {
          return GbnfError(offset, absl::StrCat("parentheses nest deeper than max_nesting_depth (",
                                                limits_.max_nesting_depth, ")"));
        }
        ++pos_;
        SkipSpace(true);
        const int32_t group = builder_.NewRule(owner_);
        if (auto status = ParseAlternatives(group, true); !status.ok()) return status;
        if (Peek() != ')') return GbnfError(pos_, "expected ')'");
        ++pos_;
        --depth_;
        if (auto status = Count(1); !status.ok()) return status;
        item_start = sequence->size();
        have_item = true;
        sequence->push_back({Kind::kRule, group});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) {
          return GbnfError(offset, absl::StrCat("'", std::string(text_.substr(offset, 1)),
                                                "' follows nothing to repeat"));
        }
        int64_t min = 0, max = -1;  // max -1: unbounded
        if (c == '*') {
          ++pos_;
        } else if (c == '+') {
          ++pos_;
          min = 1;
        } else if (c == '?') {
          ++pos_;
          max = 1;
        } else if (auto status = ParseBraces(&min, &max); !status.ok()) {
          return status;
        }
        if (auto status = Repeat(sequence, item_start, min, max); !status.ok()) return status;
        have_item = false;
      } else {
        break;
      }
      SkipSpace(nested);
    }
    return absl::OkStatus();
  }

  absl::Status ParseInt(int64_t* value) {
    const size_t start = pos_;
    *value = 0;
    while (!AtEnd() && IsDigit(Peek())) {
      *value = *value * 10 + (Peek() - '0');
      ++pos_;
      if (*value > kMaxRepetitionCount) {
        return GbnfError(start, absl::StrCat("repetition count above ", kMaxRepetitionCount));
      }
    }
    if (pos_ == start) return GbnfError(pos_, "expected a number");
    return absl::OkStatus();
  }

  absl::Status ParseBraces(int64_t* min, int64_t* max) {
    const size_t offset = pos_;
    ++pos_;
    SkipSpace(true);
    if (auto status = ParseInt(min); !status.ok()) return status;
    SkipSpace(true);
    if (Peek() == '}') {
      *max = *min;
    } else if (Peek() == ',') {
      ++pos_;
      SkipSpace(true);
      if (IsDigit(Peek())) {
        if (auto status = ParseInt(max); !status.ok()) return status;
        SkipSpace(true);
      }
      if (Peek() != '}') return GbnfError(pos_, "expected '}'");
    } else {
      return GbnfError(pos_, "expected ',' or '}'");
    }
    ++pos_;
    if (*max >= 0 && *max < *min) {
      return GbnfError(offset, absl::StrCat("repetition {", *min, ",", *max, "}: max below min"));
    }
    return absl::OkStatus();
  }

  // Replaces the item at [item_start, end) of `sequence` by its repetition min..max times.
  absl::Status Repeat(Sequence* sequence, size_t item_start, int64_t min, int64_t max) {
    Elem item;
    if (sequence->size() - item_start == 1) {
      item = sequence->back();
    } else {
      // A literal of several bytes becomes one rule, so that its copies are references.
      const int32_t wrapper = builder_.NewRule(owner_);
      builder_.alternatives(wrapper).emplace_back(sequence->begin() + item_start, sequence->end());
      item = {Kind::kRule, wrapper};
      if (auto status = Count(1); !status.ok()) return status;
    }
    // Checked before anything is built: min copies, then 2 elements per optional copy (3 for
    // the unbounded tail), less the item itself, already counted.
    if (auto status = Count(min + (max < 0 ? 3 : 2 * (max - min)) - 1); !status.ok()) {
      return status;
    }
    sequence->resize(item_start);
    for (int64_t i = 0; i < min; ++i) sequence->push_back(item);
    if (max < 0) {
      // tail ::= item tail |
      const int32_t tail = builder_.NewRule(owner_);
      builder_.alternatives(tail).push_back({item, {Kind::kRule, tail}});
      builder_.alternatives(tail).emplace_back();
      sequence->push_back({Kind::kRule, tail});
    } else if (max > min) {
      // optional(k) ::= item optional(k-1) | ; optional(1) ::= item |
      int32_t previous = -1;
      for (int64_t k = 1; k <= max - min; ++k) {
        const int32_t optional = builder_.NewRule(owner_);
        Sequence first{item};
        if (previous >= 0) first.push_back({Kind::kRule, previous});
        builder_.alternatives(optional).push_back(std::move(first));
        builder_.alternatives(optional).emplace_back();
        previous = optional;
      }
      sequence->push_back({Kind::kRule, previous});
    }
    return absl::OkStatus();
  }

  absl::Status ParseClass(CodePointRanges* ranges, bool* negate) {
    const size_t offset = pos_;
    ++pos_;
    if (Peek() == '^') {
      *negate = true;
      ++pos_;
    }
    while (true) {
      if (AtEnd()) return GbnfError(offset, "unterminated character class");
      if (Peek() == ']') break;
      uint32_t lo = 0, hi = 0;
      if (auto status = ParseChar(&lo); !status.ok()) return status;
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        const size_t range_offset = pos_;
        ++pos_;
        if (auto status = ParseChar(&hi); !status.ok()) return status;
        if (hi < lo) return GbnfError(range_offset, "a class range ends below its start");
      }
      ranges->emplace_back(lo, hi);
    }
    ++pos_;
    return absl::OkStatus();
  }

  // One character of a literal or class: an escape or one UTF-8 character of the text.
  absl::Status ParseChar(uint32_t* cp) {
    const size_t offset = pos_;
    const uint8_t c = static_cast<uint8_t>(Peek());
    if (c == '\\') {
      const char e = Peek(1);
      pos_ += 2;
      int digits = 0;
      switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 't': *cp = '\t'; return absl::OkStatus();
        case 'r': *cp = '\r'; return absl::OkStatus();
        case 'n': *cp = '\n'; return absl::OkStatus();
        case '\\': case '"': case '[': case ']': case '-':
          *cp = static_cast<uint8_t>(e);
          return absl::OkStatus();
        default:
          return GbnfError(offset, "unknown escape");
      }
      uint64_t value = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = HexValue(Peek());
        if (h < 0) return GbnfError(offset, absl::StrCat("expected ", digits, " hex digits"));
        value = value * 16 + h;
        ++pos_;
      }
      if (value > kMaxCodePoint) return GbnfError(offset, "code point above U+10FFFF");
      *cp = static_cast<uint32_t>(value);
      return absl::OkStatus();
    }
    // Strict UTF-8: no overlong forms, surrogates or values above U+10FFFF.
    int n;
    uint32_t value, min;
    if (c < 0x80) {
      n = 1, value = c, min = 0;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2, value = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, value = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, value = c & 0x07, min = 0x10000;
    } else {
      return GbnfError(offset, "invalid UTF-8");
    }
    for (int i = 1; i < n; ++i) {
      const uint8_t next = static_cast<uint8_t>(Peek(i));
      if (pos_ + i >= text_.size() || (next & 0xC0) != 0x80) {
        return GbnfError(offset, "invalid UTF-8");
      }
      value = (value << 6) | (next & 0x3F);
    }
    if (value < min || value > kMaxCodePoint || (value >= kSurrogateLo && value <= kSurrogateHi)) {
      return GbnfError(offset, "invalid UTF-8");
    }
    pos_ += n;
    *cp = value;
    return absl::OkStatus();
  }

  std::string_view text_;
  const ConstraintLimits& limits_;
  GrammarBuilder builder_;
  size_t pos_ = 0;
  int depth_ = 0;
  int32_t owner_ = 0;
};

}  // namespace

absl::StatusOr<Grammar> ParseGbnf(std::string_view gbnf, const ConstraintLimits& limits) {
  if (gbnf.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar has ", gbnf.size(),
                                                   " bytes, above max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  return GbnfParser(gbnf, limits).Parse();
}

}  // namespace linserve
