#include "server/constraints/regex_grammar.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/constraints/gbnf_builder.h"

namespace linserve {
namespace {

// Quantifier bounds past this are refused as syntax (the grammar limit refuses far less).
constexpr int64_t kMaxRepeat = 1'000'000'000;

struct Node {
  enum class Kind { kChars, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;  // a kConcat with no children matches the empty string
  CodePointSet chars;         // kChars
  std::vector<Node> children;
  int64_t min = 0, max = 0;  // kRepeat; max < 0: unbounded
};

CodePointSet Digits() { return CodePointSet::Range('0', '9'); }
CodePointSet WordChars() {
  return CodePointSet::FromRanges({{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}});
}
CodePointSet SpaceChars() { return CodePointSet::FromRanges({{'\t', '\r'}, {' ', ' '}}); }

class RegexParser {
 public:
  RegexParser(absl::string_view pattern, const ConstraintLimits& limits, bool json_string_content)
      : pattern_(pattern), limits_(limits), json_(json_string_content) {}

  absl::StatusOr<Node> Parse() {
    // ^ first and $ last change nothing: the whole output matches the pattern.
    if (!pattern_.empty() && pattern_[0] == '^') pos_ = 1;
    end_ = pattern_.size();
    if (end_ > pos_ && pattern_[end_ - 1] == '$') {
      size_t backslashes = 0;
      while (end_ - 1 - backslashes > pos_ && pattern_[end_ - 2 - backslashes] == '\\') {
        ++backslashes;
      }
      if (backslashes % 2 == 0) --end_;
    }
    absl::StatusOr<Node> node = ParseAlternation(0);
    if (!node.ok()) return node;
    if (pos_ < end_) return Error(pos_, "unbalanced ')'");
    return node;
  }

 private:
  absl::Status Error(size_t offset, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex at offset ", offset, ": ", what));
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return pattern_[pos_]; }
  bool Next(char c) const { return pos_ < end_ && pattern_[pos_] == c; }
  bool Consume(absl::string_view s) {
    if (pattern_.substr(pos_, s.size()) != s || pos_ + s.size() > end_) return false;
    pos_ += s.size();
    return true;
  }

  absl::StatusOr<Node> ParseAlternation(int depth) {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    while (true) {
      absl::StatusOr<Node> branch = ParseConcatenation(depth);
      if (!branch.ok()) return branch.status();
      alt.children.push_back(*std::move(branch));
      if (!Next('|')) break;
      ++pos_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  absl::StatusOr<Node> ParseConcatenation(int depth) {
    Node concat;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (IsQuantifierStart()) return Error(pos_, "nothing to repeat");
      absl::StatusOr<Node> atom = ParseAtom(depth);
      if (!atom.ok()) return atom.status();
      Node node = *std::move(atom);
      if (IsQuantifierStart()) {
        const size_t quantifier_offset = pos_;
        int64_t min = 0, max = 0;
        ParseQuantifier(&min, &max);
        if (min > kMaxRepeat || max > kMaxRepeat) {
          return Error(quantifier_offset, absl::StrCat("repetition count over ", kMaxRepeat));
        }
        if (max >= 0 && min > max) {
          return Error(quantifier_offset, "repetition {m,n} with m > n");
        }
        if (Next('?')) {
          ++pos_;  // lazy: the same language
        } else if (Next('+')) {
          return Error(pos_, "possessive quantifiers are not supported");
        }
        if (IsQuantifierStart()) return Error(pos_, "multiple repeat");
        Node repeat;
        repeat.kind = Node::Kind::kRepeat;
        repeat.min = min;
        repeat.max = max;
        repeat.children.push_back(std::move(node));
        node = std::move(repeat);
      }
      concat.children.push_back(std::move(node));
    }
    if (concat.children.size() == 1) return std::move(concat.children[0]);
    return concat;
  }

  // At *, +, ? or a {m}, {m,}, {m,n} (a `{` that starts none of these is a literal).
  bool IsQuantifierStart() const {
    if (AtEnd()) return false;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') return true;
    if (c != '{') return false;
    size_t i = pos_ + 1;
    const auto digits = [&] {
      const size_t start = i;
      while (i < end_ && absl::ascii_isdigit(static_cast<unsigned char>(pattern_[i]))) ++i;
      return i > start;
    };
    if (!digits()) return false;
    if (i < end_ && pattern_[i] == ',') {
      ++i;
      digits();
    }
    return i < end_ && pattern_[i] == '}';
  }

  // Reads the quantifier IsQuantifierStart found.
  void ParseQuantifier(int64_t* min, int64_t* max) {
    const char c = pattern_[pos_++];
    if (c == '*' || c == '+' || c == '?') {
      *min = c == '+' ? 1 : 0;
      *max = c == '?' ? 1 : -1;
      return;
    }
    const auto number = [&] {
      int64_t value = 0;
      while (absl::ascii_isdigit(static_cast<unsigned char>(pattern_[pos_]))) {
        value = std::min(kMaxRepeat + 1, value * 10 + (pattern_[pos_++] - '0'));
      }
      return value;
    };
    *min = number();
    *max = *min;
    if (pattern_[pos_] == ',') {
      ++pos_;
      *max = absl::ascii_isdigit(static_cast<unsigned char>(pattern_[pos_])) ? number() : -1;
    }
    ++pos_;  // '}'
  }

  absl::StatusOr<Node> ParseAtom(int depth) {
    const size_t offset = pos_;
    const char c = Peek();
    if (c == '(') return ParseGroup(depth);
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Chars(offset, CodePointSet::Single('\n').Complement());
    }
    if (c == '^') return Error(offset, "'^' is supported only at the start of the pattern");
    if (c == '$') return Error(offset, "'$' is supported only at the end of the pattern");
    if (c == '\\') {
      absl::StatusOr<CodePointSet> set = ParseEscape(/*in_class=*/false);
      if (!set.ok()) return set.status();
      return Chars(offset, *set);
    }
    absl::StatusOr<uint32_t> cp = ParseCodePoint();
    if (!cp.ok()) return cp.status();
    return Chars(offset, CodePointSet::Single(*cp));
  }

  absl::StatusOr<Node> Chars(size_t offset, const CodePointSet& set) {
    Node node;
    node.kind = Node::Kind::kChars;
    node.chars = json_ ? set.Intersect(JsonUnescapedChars()) : set;
    if (node.chars.empty()) {
      return Error(offset, json_ ? "matches only characters a JSON string must escape"
                                 : "matches no character");
    }
    return node;
  }

  absl::StatusOr<Node> ParseGroup(int depth) {
    const size_t offset = pos_++;
    if (depth + 1 > limits_.max_nesting_depth) {
      return Error(offset, absl::StrCat("groups nest deeper than max_nesting_depth (",
                                        limits_.max_nesting_depth, ")"));
    }
    if (Consume("?")) {
      if (Consume(":")) {
      } else if (Consume("=") || Consume("!") || Consume("<=") || Consume("<!")) {
        return Error(offset, "lookaround is not supported");
      } else if (Consume("P=")) {
        return Error(offset, "backreferences are not supported");
      } else if (Consume("P<") || Consume("<")) {
        const size_t name_start = pos_;
        while (!AtEnd() && (absl::ascii_isalnum(static_cast<unsigned char>(Peek())) ||
                            Peek() == '_')) {
          ++pos_;
        }
        if (pos_ == name_start || !Consume(">")) return Error(pos_, "bad group name");
      } else {
        return Error(offset, "flags and other (? groups are not supported");
      }
    }
    absl::StatusOr<Node> inner = ParseAlternation(depth + 1);
    if (!inner.ok()) return inner;
    if (!Consume(")")) return Error(offset, "missing ')'");
    return inner;
  }

  absl::StatusOr<Node> ParseClass() {
    const size_t offset = pos_++;
    const bool negated = Consume("^");
    if (Next(']')) return Error(pos_, "']' first in a class is ambiguous: write \\]");
    // Collected, then merged once (a class of many items stays linear).
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (!Next(']')) {
      if (AtEnd()) return Error(offset, "missing ']'");
      const size_t item_offset = pos_;
      absl::StatusOr<CodePointSet> lo = ClassItem();
      if (!lo.ok()) return lo.status();
      if (Next('-') && pos_ + 1 < end_ && pattern_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<CodePointSet> hi = ClassItem();
        if (!hi.ok()) return hi.status();
        if (!lo->IsSingle() || !hi->IsSingle()) {
          return Error(item_offset, "a range's ends must be characters");
        }
        const uint32_t a = lo->ranges()[0].first;
        const uint32_t b = hi->ranges()[0].first;
        if (a > b) return Error(item_offset, "range out of order");
        ranges.emplace_back(a, b);
      } else {
        ranges.insert(ranges.end(), lo->ranges().begin(), lo->ranges().end());
      }
    }
    ++pos_;  // ']'
    const CodePointSet set = CodePointSet::FromRanges(std::move(ranges));
    return Chars(offset, negated ? set.Complement() : set);
  }

  absl::StatusOr<CodePointSet> ClassItem() {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true);
    absl::StatusOr<uint32_t> cp = ParseCodePoint();
    if (!cp.ok()) return cp.status();
    return CodePointSet::Single(*cp);
  }

  // One UTF-8 character, literally.
  absl::StatusOr<uint32_t> ParseCodePoint() {
    const size_t offset = pos_;
    const uint8_t b0 = static_cast<uint8_t>(pattern_[pos_]);
    const int length = b0 < 0x80              ? 1
                       : (b0 & 0xE0) == 0xC0 ? 2
                       : (b0 & 0xF0) == 0xE0 ? 3
                       : (b0 & 0xF8) == 0xF0 ? 4
                                             : 0;
    if (length == 0 || pos_ + length > end_) return Error(offset, "invalid UTF-8");
    uint32_t c = length == 1 ? b0 : b0 & (0x7F >> length);
    for (int k = 1; k < length; ++k) {
      const uint8_t b = static_cast<uint8_t>(pattern_[pos_ + k]);
      if ((b & 0xC0) != 0x80) return Error(offset, "invalid UTF-8");
      c = (c << 6) | (b & 0x3F);
    }
    const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_for_length[length] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) {
      return Error(offset, "invalid UTF-8");
    }
    pos_ += length;
    return c;
  }

  // `n` hex digits after the escape letter.
  absl::StatusOr<uint32_t> Hex(size_t offset, int n) {
    uint32_t value = 0;
    for (int k = 0; k < n; ++k) {
      if (AtEnd() || !absl::ascii_isxdigit(static_cast<unsigned char>(Peek()))) {
        return Error(offset, absl::StrCat("escape needs ", n, " hex digits"));
      }
      const char h = absl::ascii_tolower(static_cast<unsigned char>(pattern_[pos_++]));
      value = value * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    if (value >= 0xD800 && value <= 0xDFFF) return Error(offset, "a surrogate is no character");
    return value;
  }

  absl::StatusOr<CodePointSet> ParseEscape(bool in_class) {
    const size_t offset = pos_++;
    if (AtEnd()) return Error(offset, "'\\' at the end of the pattern");
    const char c = pattern_[pos_];
    if (static_cast<unsigned char>(c) >= 0x80) {
      absl::StatusOr<uint32_t> cp = ParseCodePoint();
      if (!cp.ok()) return cp.status();
      return CodePointSet::Single(*cp);
    }
    ++pos_;
    switch (c) {
      case 'd': return Digits();
      case 'D': return Digits().Complement();
      case 'w': return WordChars();
      case 'W': return WordChars().Complement();
      case 's': return SpaceChars();
      case 'S': return SpaceChars().Complement();
      case 'n': return CodePointSet::Single('\n');
      case 't': return CodePointSet::Single('\t');
      case 'r': return CodePointSet::Single('\r');
      case 'f': return CodePointSet::Single('\f');
      case 'v': return CodePointSet::Single('\v');
      case 'x':
      case 'u': {
        absl::StatusOr<uint32_t> cp = Hex(offset, c == 'x' ? 2 : 4);
        if (!cp.ok()) return cp.status();
        return CodePointSet::Single(*cp);
      }
      case '0':
        if (!AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
          return Error(offset, "octal escapes are not supported");
        }
        return CodePointSet::Single(0);
      case 'b':
        if (in_class) return CodePointSet::Single('\b');
        return Error(offset, "anchors other than ^ and $ (here \\b) are not supported");
      case 'B':
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return Error(offset, absl::StrCat("anchors other than ^ and $ (here \\", std::string(1, c),
                                          ") are not supported"));
      case 'k':
        return Error(offset, "backreferences are not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Error(offset, "backreferences are not supported");
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      return Error(offset, absl::StrCat("unsupported escape \\", std::string(1, c)));
    }
    return CodePointSet::Single(static_cast<unsigned char>(c));
  }

  absl::string_view pattern_;
  const ConstraintLimits& limits_;
  const bool json_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

// Writes a parsed pattern as GBNF: an alternation of several branches becomes a helper rule,
// the rest is written in place. Estimates count every repetition written out in full (a helper
// rule's elements wherever it is used), so that (a{1000}){1000} counts a million.
class RegexWriter {
 public:
  explicit RegexWriter(absl::string_view name) : name_(name) {}

  GbnfExpr Write(const Node& node) {
    switch (node.kind) {
      case Node::Kind::kChars:
        return GbnfChars(node.chars);
      case Node::Kind::kConcat: {
        std::vector<GbnfExpr> parts;
        for (const Node& child : node.children) parts.push_back(Write(child));
        return GbnfSeq(parts);
      }
      case Node::Kind::kAlt: {
        std::vector<GbnfExpr> branches;
        bool optional = false;
        for (const Node& child : node.children) {
          GbnfExpr branch = Write(child);
          if (branch.text.empty()) {
            optional = true;
          } else {
            branches.push_back(std::move(branch));
          }
        }
        if (branches.empty()) return GbnfExpr{};
        GbnfExpr e = branches.size() == 1 ? branches[0] : Helper(branches);
        return optional ? GbnfRepeat(e, 0, 1) : e;
      }
      case Node::Kind::kRepeat: {
        GbnfExpr child = Write(node.children[0]);
        if (child.text.empty() || node.max == 0) return GbnfExpr{};
        if (node.min == 1 && node.max == 1) return child;
        return GbnfRepeat(child, node.min, node.max);
      }
    }
    return GbnfExpr{};
  }

  const std::string& helpers() const { return helpers_; }

 private:
  // A rule `name`-N ::= the branches, referred to with the branches' estimate.
  GbnfExpr Helper(const std::vector<GbnfExpr>& branches) {
    const std::string name = absl::StrCat(name_, "-", ++helper_count_);
    int64_t elements = 0;
    absl::StrAppend(&helpers_, name, " ::=");
    for (size_t i = 0; i < branches.size(); ++i) {
      absl::StrAppend(&helpers_, i > 0 ? " | " : " ", branches[i].text);
      elements = SaturatingAdd(elements, SaturatingAdd(branches[i].elements, 1));
    }
    helpers_ += "\n";
    return GbnfExpr{name, elements, true};
  }

  std::string name_;
  int helper_count_ = 0;
  std::string helpers_;
};

}  // namespace

absl::StatusOr<RegexRules> RegexToGbnfRules(std::string_view pattern,
                                            const ConstraintLimits& limits, std::string_view name,
                                            bool json_string_content, int64_t max_elements) {
  if (pattern.size() > static_cast<size_t>(limits.max_text_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("regex of ", pattern.size(),
                                                   " bytes exceeds max_text_bytes (",
                                                   limits.max_text_bytes, ")"));
  }
  absl::StatusOr<Node> node =
      RegexParser(absl::string_view(pattern.data(), pattern.size()), limits, json_string_content)
          .Parse();
  if (!node.ok()) return node.status();
  RegexWriter writer(absl::string_view(name.data(), name.size()));
  GbnfExpr root = writer.Write(*node);
  if (root.text.empty()) {
    return absl::InvalidArgumentError("regex matches only the empty string");
  }
  if (root.elements > max_elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: the grammar would exceed max_grammar_elements (", max_elements,
                     ")"));
  }
  return RegexRules{absl::StrCat(absl::string_view(name.data(), name.size()), " ::= ", root.text, "\n", writer.helpers()),
                    root.elements};
}

absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern,
                                        const ConstraintLimits& limits) {
  absl::StatusOr<RegexRules> rules =
      RegexToGbnfRules(pattern, limits, "root", /*json_string_content=*/false,
                       limits.max_grammar_elements);
  if (!rules.ok()) return rules.status();
  return std::move(rules->text);
}

}  // namespace linserve
