#include "server/constraints/grammar.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800;
constexpr uint32_t kSurrogateHi = 0xDFFF;
// Repetition counts above this are refused before any arithmetic on them.
constexpr int64_t kMaxRepetitionCount = 1'000'000'000;

using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive, sorted

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

// A sequence of byte ranges: the UTF-8 encodings of one code-point range.
using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (no surrogates inside) into ranges whose UTF-8 encodings are exactly the
// products of per-byte ranges (the classic construction of RE2 and Rust's utf8-ranges).
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

// Sorted, merged, without surrogates; negated over every Unicode scalar value when `negate`.
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

}  // namespace

// Builds a Grammar while reading GBNF; the checks and the flattening happen in Finish.
class GrammarBuilder {
 public:
  GrammarBuilder(std::string_view text, const ConstraintLimits& limits)
      : text_(text), limits_(limits) {}

  absl::StatusOr<Grammar> Parse() {
    SkipSpace(true);
    while (pos_ < text_.size()) {
      if (auto status = ParseRule(); !status.ok()) return status;
    }
    return Finish();
  }

 private:
  using Kind = Grammar::ElementKind;
  struct Elem {
    Kind kind;
    int32_t value;
  };
  using Sequence = std::vector<Elem>;
  struct Rule {
    std::string name;
    int32_t owner = -1;             // the user rule a generated rule belongs to; itself if user
    bool defined = false;
    size_t offset = 0;              // where it was defined (or first referenced)
    std::vector<Sequence> alternatives;
  };

  absl::Status Error(size_t offset, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("at byte ", offset, ": ", std::string(message)));
  }

  absl::Status Count(int64_t elements) {
    elements_ += elements;
    if (elements_ > limits_.max_grammar_elements) {
      return Error(pos_, absl::StrCat("the grammar exceeds max_grammar_elements (",
                                      limits_.max_grammar_elements,
                                      ") once repetitions and classes are expanded"));
    }
    return absl::OkStatus();
  }

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

  int32_t UserRule(std::string_view name, size_t offset) {
    auto [it, inserted] =
        names_.try_emplace(std::string(name), static_cast<int32_t>(rules_.size()));
    if (inserted) {
      Rule rule;
      rule.name = std::string(name);
      rule.owner = it->second;
      rule.offset = offset;
      rules_.push_back(std::move(rule));
    }
    return it->second;
  }

  int32_t NewRule(int32_t owner) {
    Rule rule;
    rule.name = absl::StrCat(rules_[owner].name, "-", rules_.size());
    rule.owner = owner;
    rule.defined = true;
    rule.offset = rules_[owner].offset;
    rules_.push_back(std::move(rule));
    return static_cast<int32_t>(rules_.size()) - 1;
  }

  int32_t InternByteSet(const ByteSet& set) {
    auto [it, inserted] =
        byte_set_index_.try_emplace(set.words, static_cast<int32_t>(sets_.size()));
    if (inserted) sets_.push_back(set);
    return it->second;
  }

  absl::Status ParseRule() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    if (pos_ == start) return Error(pos_, "expected a rule name");
    const std::string_view name = text_.substr(start, pos_ - start);
    const int32_t rule = UserRule(name, start);
    if (rules_[rule].defined) {
      return Error(start, absl::StrCat("rule '", std::string(name), "' is defined twice"));
    }
    rules_[rule].defined = true;
    rules_[rule].offset = start;
    owner_ = rule;
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") return Error(pos_, "expected '::='");
    pos_ += 3;
    SkipSpace(true);
    if (auto status = ParseAlternatives(rule, false); !status.ok()) return status;
    if (Peek() == '\r') {
      pos_ += Peek(1) == '\n' ? 2 : 1;
    } else if (Peek() == '\n') {
      ++pos_;
    } else if (!AtEnd()) {
      return Error(pos_, absl::StrCat("expected a newline or the end, got '",
                                      std::string(text_.substr(pos_, 1)), "'"));
    }
    SkipSpace(true);
    return absl::OkStatus();
  }

  absl::Status ParseAlternatives(int32_t rule, bool nested) {
    while (true) {
      Sequence sequence;
      if (auto status = ParseSequence(nested, &sequence); !status.ok()) return status;
      rules_[rule].alternatives.push_back(std::move(sequence));
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
          if (AtEnd()) return Error(offset, "unterminated literal");
          if (Peek() == '"') break;
          uint32_t cp = 0;
          if (auto status = ParseChar(&cp); !status.ok()) return status;
          if (cp >= kSurrogateLo && cp <= kSurrogateHi) {
            return Error(pos_, "a surrogate code point is not a character");
          }
          uint8_t bytes[4];
          const int n = EncodeUtf8(cp, bytes);
          if (auto status = Count(n); !status.ok()) return status;
          for (int i = 0; i < n; ++i) {
            ByteSet set;
            set.Add(bytes[i]);
            sequence->push_back({Kind::kBytes, InternByteSet(set)});
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
        auto element = LowerClass(NormalizeRanges(std::move(ranges), negate));
        if (!element.ok()) return element.status();
        sequence->push_back(*element);
      } else if (IsNameChar(c)) {
        while (!AtEnd() && IsNameChar(Peek())) ++pos_;
        if (auto status = Count(1); !status.ok()) return status;
        item_start = sequence->size();
        have_item = true;
        sequence->push_back({Kind::kRule, UserRule(text_.substr(offset, pos_ - offset), offset)});
      } else if (c == '(') {
        if (++depth_ > limits_.max_nesting_depth) {
          return Error(offset, absl::StrCat("parentheses nest deeper than max_nesting_depth (",
                                            limits_.max_nesting_depth, ")"));
        }
        ++pos_;
        SkipSpace(true);
        const int32_t group = NewRule(owner_);
        if (auto status = ParseAlternatives(group, true); !status.ok()) return status;
        if (Peek() != ')') return Error(pos_, "expected ')'");
        ++pos_;
        --depth_;
        if (auto status = Count(1); !status.ok()) return status;
        item_start = sequence->size();
        have_item = true;
        sequence->push_back({Kind::kRule, group});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) return Error(offset, absl::StrCat("'", std::string(text_.substr(offset, 1)),
                                                          "' follows nothing to repeat"));
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
        return Error(start, absl::StrCat("repetition count above ", kMaxRepetitionCount));
      }
    }
    if (pos_ == start) return Error(pos_, "expected a number");
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
      if (Peek() != '}') return Error(pos_, "expected '}'");
    } else {
      return Error(pos_, "expected ',' or '}'");
    }
    ++pos_;
    if (*max >= 0 && *max < *min) {
      return Error(offset, absl::StrCat("repetition {", *min, ",", *max, "}: max below min"));
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
      const int32_t wrapper = NewRule(owner_);
      rules_[wrapper].alternatives.emplace_back(sequence->begin() + item_start, sequence->end());
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
      const int32_t tail = NewRule(owner_);
      rules_[tail].alternatives.push_back({item, {Kind::kRule, tail}});
      rules_[tail].alternatives.emplace_back();
      sequence->push_back({Kind::kRule, tail});
    } else if (max > min) {
      // optional(k) ::= item optional(k-1) | ; optional(1) ::= item |
      int32_t previous = -1;
      for (int64_t k = 1; k <= max - min; ++k) {
        const int32_t optional = NewRule(owner_);
        Sequence first{item};
        if (previous >= 0) first.push_back({Kind::kRule, previous});
        rules_[optional].alternatives.push_back(std::move(first));
        rules_[optional].alternatives.emplace_back();
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
      if (AtEnd()) return Error(offset, "unterminated character class");
      if (Peek() == ']') break;
      uint32_t lo = 0, hi = 0;
      if (auto status = ParseChar(&lo); !status.ok()) return status;
      hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < text_.size()) {
        const size_t range_offset = pos_;
        ++pos_;
        if (auto status = ParseChar(&hi); !status.ok()) return status;
        if (hi < lo) return Error(range_offset, "a class range ends below its start");
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
          return Error(offset, "unknown escape");
      }
      uint64_t value = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = HexValue(Peek());
        if (h < 0) return Error(offset, absl::StrCat("expected ", digits, " hex digits"));
        value = value * 16 + h;
        ++pos_;
      }
      if (value > kMaxCodePoint) return Error(offset, "code point above U+10FFFF");
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
      return Error(offset, "invalid UTF-8");
    }
    for (int i = 1; i < n; ++i) {
      const uint8_t next = static_cast<uint8_t>(Peek(i));
      if (pos_ + i >= text_.size() || (next & 0xC0) != 0x80) return Error(offset, "invalid UTF-8");
      value = (value << 6) | (next & 0x3F);
    }
    if (value < min || value > kMaxCodePoint || (value >= kSurrogateLo && value <= kSurrogateHi)) {
      return Error(offset, "invalid UTF-8");
    }
    pos_ += n;
    *cp = value;
    return absl::OkStatus();
  }

  // A class as one element: a byte set when it is ASCII only, else a reference to a rule whose
  // alternatives are its UTF-8 byte sequences (one rule per distinct class).
  absl::StatusOr<Elem> LowerClass(CodePointRanges ranges) {
    if (auto status = Count(1); !status.ok()) return status;
    if (!ranges.empty() && ranges.back().second < 0x80) {
      ByteSet set;
      for (const auto& [lo, hi] : ranges) {
        set.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      }
      return Elem{Kind::kBytes, InternByteSet(set)};
    }
    auto found = class_rules_.find(ranges);
    if (found != class_rules_.end()) return Elem{Kind::kRule, found->second};
    std::vector<ByteRangeSequence> sequences;
    for (const auto& [lo, hi] : ranges) SplitUtf8(lo, hi, &sequences);
    // Single bytes share one alternative.
    ByteSet single;
    std::vector<Sequence> alternatives;
    int64_t elements = 0;
    for (const auto& sequence : sequences) {
      if (sequence.size() == 1) {
        single.AddRange(sequence[0].first, sequence[0].second);
        continue;
      }
      Sequence alternative;
      for (const auto& [lo, hi] : sequence) {
        ByteSet set;
        set.AddRange(lo, hi);
        alternative.push_back({Kind::kBytes, InternByteSet(set)});
      }
      elements += static_cast<int64_t>(alternative.size());
      alternatives.push_back(std::move(alternative));
    }
    if (!single.empty()) {
      alternatives.insert(alternatives.begin(), Sequence{{Kind::kBytes, InternByteSet(single)}});
      ++elements;
    }
    if (auto status = Count(elements); !status.ok()) return status;
    const int32_t rule = NewRule(owner_);
    rules_[rule].name = absl::StrCat("class-", rule);
    rules_[rule].alternatives = std::move(alternatives);
    class_rules_.emplace(std::move(ranges), rule);
    return Elem{Kind::kRule, rule};
  }

  absl::StatusOr<Grammar> Finish() {
    const int32_t n = static_cast<int32_t>(rules_.size());
    for (const Rule& rule : rules_) {
      if (!rule.defined) {
        return Error(rule.offset, absl::StrCat("undefined rule '", rule.name, "'"));
      }
    }
    const auto root = names_.find("root");
    if (root == names_.end()) return Error(text_.size(), "no rule 'root'");

    // Productive rules (those that match some finite string), to a fixed point.
    std::vector<bool> productive(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (productive[r]) continue;
        for (const Sequence& alternative : rules_[r].alternatives) {
          if (std::all_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
                return e.kind == Kind::kBytes || productive[e.value];
              })) {
            productive[r] = changed = true;
            break;
          }
        }
      }
    }
    for (int32_t r = 0; r < n; ++r) {
      if (!productive[r] && rules_[r].owner == r) {
        return Error(rules_[r].offset,
                     absl::StrCat("rule '", rules_[r].name, "' matches no finite string"));
      }
      const auto dead = [&](const Sequence& alternative) {
        return std::any_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
          return e.kind == Kind::kRule && !productive[e.value];
        });
      };
      auto& alternatives = rules_[r].alternatives;
      alternatives.erase(std::remove_if(alternatives.begin(), alternatives.end(), dead),
                         alternatives.end());
    }

    // Nullable rules, to a fixed point; then the rules each can reach before any byte.
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alternative : rules_[r].alternatives) {
          if (std::all_of(alternative.begin(), alternative.end(), [&](const Elem& e) {
                return e.kind == Kind::kRule && nullable[e.value];
              })) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    std::vector<std::vector<int32_t>> left(n);
    for (int32_t r = 0; r < n; ++r) {
      for (const Sequence& alternative : rules_[r].alternatives) {
        for (const Elem& e : alternative) {
          if (e.kind != Kind::kRule) break;
          left[r].push_back(e.value);
          if (!nullable[e.value]) break;
        }
      }
    }
    // Depth-first search for a cycle, iterative (a chain of rules may be long).
    std::vector<uint8_t> color(n, 0);  // 0 unvisited, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> path;
    for (int32_t start = 0; start < n; ++start) {
      if (color[start] != 0) continue;
      path.emplace_back(start, 0);
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == left[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const int32_t to = left[r][next++];
        if (color[to] == 1) {
          const Rule& user = rules_[rules_[to].owner];
          return Error(user.offset,
                       absl::StrCat("rule '", user.name,
                                    "' is left-recursive: it can reach itself before matching "
                                    "any byte (directly, through other rules, or through a "
                                    "repetition of something that can match nothing)"));
        }
        if (color[to] == 0) {
          color[to] = 1;
          path.emplace_back(to, 0);
        }
      }
    }

    LeftFactor();

    Grammar grammar;
    grammar.root_ = root->second;
    grammar.byte_sets_ = std::move(sets_);
    grammar.rule_alternatives_.reserve(rules_.size() + 1);
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Sequence& alternative : rules_[r].alternatives) {
        grammar.alternative_starts_.push_back(static_cast<int32_t>(grammar.elements_.size()));
        for (const Elem& e : alternative) grammar.elements_.push_back({e.kind, e.value});
        grammar.num_elements_ += static_cast<int64_t>(alternative.size());
        grammar.elements_.push_back({Kind::kEnd, 0});
      }
      grammar.rule_alternatives_.push_back(
          static_cast<int32_t>(grammar.alternative_starts_.size()));
      grammar.rule_names_.push_back(std::move(rules_[r].name));
    }
    return grammar;
  }

  // Left-factors every rule: alternatives that begin with the same element share their longest
  // common prefix, followed by a new rule of their rests, and duplicates go. The language is the
  // same, and a matcher holds one stack per distinct next element rather than one per
  // alternative (an enum of 2000 strings needs a few stacks, not 2000). Runs after the checks,
  // so their errors name the rules as written; it adds no left recursion (a new rule's first
  // elements were its parent's).
  void LeftFactor() {
    const auto less = [](const Sequence& a, const Sequence& b) {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                          [](const Elem& x, const Elem& y) {
                                            return std::pair(x.kind, x.value) <
                                                   std::pair(y.kind, y.value);
                                          });
    };
    const auto same = [](const Elem& x, const Elem& y) {
      return x.kind == y.kind && x.value == y.value;
    };
    const auto equal = [&](const Sequence& a, const Sequence& b) {
      return std::equal(a.begin(), a.end(), b.begin(), b.end(), same);
    };
    std::vector<int32_t> work(rules_.size());
    for (size_t r = 0; r < work.size(); ++r) work[r] = static_cast<int32_t>(r);
    while (!work.empty()) {
      const int32_t r = work.back();
      work.pop_back();
      std::vector<Sequence> alternatives = std::move(rules_[r].alternatives);
      std::sort(alternatives.begin(), alternatives.end(), less);
      alternatives.erase(std::unique(alternatives.begin(), alternatives.end(), equal),
                         alternatives.end());
      std::vector<Sequence> factored;
      for (size_t i = 0; i < alternatives.size();) {
        size_t j = i + 1;
        while (j < alternatives.size() && !alternatives[i].empty() &&
               !alternatives[j].empty() && same(alternatives[j][0], alternatives[i][0])) {
          ++j;
        }
        if (j - i == 1) {
          factored.push_back(std::move(alternatives[i]));
          i = j;
          continue;
        }
        // Sorted: the first and the last of the run share what they all share.
        const Sequence& first = alternatives[i];
        const Sequence& last = alternatives[j - 1];
        size_t shared = 0;
        while (shared < first.size() && shared < last.size() &&
               same(first[shared], last[shared])) {
          ++shared;
        }
        const int32_t rests = NewRule(rules_[r].owner);
        for (size_t k = i; k < j; ++k) {
          rules_[rests].alternatives.emplace_back(alternatives[k].begin() + shared,
                                                  alternatives[k].end());
        }
        Sequence prefix(first.begin(), first.begin() + shared);
        prefix.push_back({Kind::kRule, rests});
        factored.push_back(std::move(prefix));
        work.push_back(rests);
        i = j;
      }
      rules_[r].alternatives = std::move(factored);
    }
  }

  std::string_view text_;
  const ConstraintLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int32_t owner_ = 0;
  int64_t elements_ = 0;
  std::vector<Rule> rules_;
  absl::flat_hash_map<std::string, int32_t> names_;
  std::vector<ByteSet> sets_;
  absl::flat_hash_map<std::array<uint64_t, 4>, int32_t> byte_set_index_;
  std::map<CodePointRanges, int32_t> class_rules_;
};

absl::StatusOr<Grammar> ParseGbnf(std::string_view gbnf, const ConstraintLimits& limits) {
  if (gbnf.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the grammar has ", gbnf.size(),
                                                   " bytes, above max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  return GrammarBuilder(gbnf, limits).Parse();
}

}  // namespace linserve
