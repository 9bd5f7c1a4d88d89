// GbnfExpr: a piece of GBNF text (llama.cpp's syntax, as ParseGbnf reads it) with an estimate of
// the byte-level grammar elements ParseGbnf makes of it, and GbnfRules: the rules of a grammar
// being written. The compilers that write GBNF (json_schema_grammar.cc, regex_grammar.cc) build
// their output from these, so that a schema or pattern whose grammar would exceed
// ConstraintLimits::max_grammar_elements is refused before its text is written out.
//
// The estimate follows ParseGbnf's expansion: x{m,n} costs about n copies of x (and a rule per
// optional copy); a character class costs one element per ASCII range and a few per UTF-8 length
// its other ranges span. It is an estimate: ParseGbnf counts exactly, and refuses in its turn.
#ifndef LINSERVE_SERVER_CONSTRAINTS_GBNF_BUILDER_H_
#define LINSERVE_SERVER_CONSTRAINTS_GBNF_BUILDER_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace linserve {

// Past this an estimate stops growing (so that products of repetitions cannot overflow).
inline constexpr int64_t kGbnfElementsCap = int64_t{1} << 50;
int64_t SaturatingAdd(int64_t a, int64_t b);
int64_t SaturatingMul(int64_t a, int64_t b);

struct GbnfExpr {
  std::string text;  // empty: matches the empty string (never written alone as a rule body)
  int64_t elements = 0;
  // True when `text` is one literal, class, rule reference or parenthesized group, so that a
  // repetition operator may follow it directly.
  bool atomic = true;
};

// "..." matching `utf8` exactly (code points above ASCII written as \u / \U escapes).
GbnfExpr GbnfLiteral(absl::string_view utf8);
// A reference to rule `name`.
GbnfExpr GbnfRef(absl::string_view name);

// A set of Unicode scalar values as sorted, disjoint, non-adjacent closed ranges; surrogates
// (U+D800..U+DFFF) are never members: only valid UTF-8 is generated.
class CodePointSet {
 public:
  CodePointSet() = default;
  // Ranges in any order, overlapping or not; the parts past U+10FFFF and surrogates are dropped.
  static CodePointSet FromRanges(std::vector<std::pair<uint32_t, uint32_t>> ranges);
  static CodePointSet Range(uint32_t lo, uint32_t hi);
  static CodePointSet Single(uint32_t c) { return Range(c, c); }

  CodePointSet Complement() const;
  CodePointSet Intersect(const CodePointSet& other) const;
  bool empty() const { return ranges_.empty(); }
  // The one member when there is exactly one.
  bool IsSingle() const { return ranges_.size() == 1 && ranges_[0].first == ranges_[0].second; }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// The set as a literal (one member) or a [...] class. `set` must not be empty.
GbnfExpr GbnfChars(const CodePointSet& set);
// The characters a JSON string holds unescaped: all but '"', '\\', U+0000..U+001F and U+007F.
CodePointSet JsonUnescapedChars();

// `parts` in sequence; empty parts are skipped.
GbnfExpr GbnfSeq(const std::vector<GbnfExpr>& parts);
// "(a | b | ...)"; every alternative must be non-empty.
GbnfExpr GbnfAlt(const std::vector<GbnfExpr>& alternatives);
// e{min,max}, max < 0: unbounded; written as ?, *, + where those fit. e must be non-empty.
GbnfExpr GbnfRepeat(const GbnfExpr& e, int64_t min, int64_t max);

// The rules of one grammar, in the order they were added, with the sum of their estimates.
class GbnfRules {
 public:
  explicit GbnfRules(int64_t max_elements) : max_elements_(max_elements) {}
  // Adds `name ::= body`. INVALID_ARGUMENT naming max_grammar_elements when the grammar's
  // estimate passes it. `body` must be non-empty.
  absl::Status Add(absl::string_view name, const GbnfExpr& body);
  // Text added verbatim (rules written elsewhere), with its estimate.
  absl::Status AddText(absl::string_view rules, int64_t elements);
  // Fails as Add would when `elements` more would pass the limit.
  absl::Status Check(int64_t elements) const;
  int64_t max_elements() const { return max_elements_; }
  const std::string& text() const { return text_; }

 private:
  int64_t max_elements_;
  int64_t elements_ = 0;
  std::string text_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_GBNF_BUILDER_H_
