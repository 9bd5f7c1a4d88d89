// Grammar: a byte-level context-free grammar, the form every constraint compiles to, and
// ParseGbnf, which reads llama.cpp's GBNF into it.
//
// A grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence of
// elements, each a byte set (one byte out of up to 256) or a reference to a rule. The
// alternatives lie in one flat element array, each followed by an end element, so that a parse
// position is one index into it (what GrammarMatcher's stacks hold). GBNF's code-point literals
// and classes are lowered to exact UTF-8 byte sequences (surrogates excluded), so only valid
// UTF-8 is ever accepted.
//
// A parsed grammar is checked: every referenced rule is defined, none is left-recursive (directly,
// indirectly or through a prefix that can match nothing), every user rule matches some finite
// string, and alternatives that can never complete are dropped, so that every position a matcher
// reaches can still complete a document. Rules are then left-factored (alternatives that begin
// alike share their prefix, duplicates go), so that a matcher needs one parse stack per distinct
// next element rather than one per alternative.
//
// Immutable after ParseGbnf: thread-safe.
#ifndef LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_H_
#define LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/constraints/constraint_spec.h"

namespace linserve {

// 256 bits, bit b = byte b.
struct ByteSet {
  std::array<uint64_t, 4> words{};

  bool Contains(uint8_t byte) const { return (words[byte >> 6] >> (byte & 63)) & 1; }
  void Add(uint8_t byte) { words[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  ByteSet& operator|=(const ByteSet& other) {
    for (int i = 0; i < 4; ++i) words[i] |= other.words[i];
    return *this;
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  friend bool operator==(const ByteSet&, const ByteSet&) = default;
};

class Grammar {
 public:
  enum class ElementKind : uint8_t {
    kBytes,  // value: index of a byte_set
    kRule,   // value: the rule referenced
    kEnd,    // the end of an alternative
  };
  struct Element {
    ElementKind kind;
    int32_t value;
  };

  int32_t root() const { return root_; }
  int32_t num_rules() const { return static_cast<int32_t>(rule_alternatives_.size()) - 1; }
  // Positions (indices into the element array) where each alternative of `rule` begins.
  absl::Span<const int32_t> alternatives(int32_t rule) const {
    return absl::MakeConstSpan(alternative_starts_)
        .subspan(rule_alternatives_[rule], rule_alternatives_[rule + 1] - rule_alternatives_[rule]);
  }
  int32_t num_positions() const { return static_cast<int32_t>(elements_.size()); }
  const Element& element(int32_t position) const { return elements_[position]; }
  const ByteSet& byte_set(int32_t index) const { return byte_sets_[index]; }
  // The GBNF name of a rule; rules made for groups, repetitions and classes are named after the
  // rule they occur in, with a suffix.
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  // Terminals and rule references (what limits.max_grammar_elements counts).
  int64_t num_elements() const { return num_elements_; }

 private:
  friend class GrammarBuilder;

  int32_t root_ = 0;
  std::vector<Element> elements_;
  std::vector<int32_t> alternative_starts_;
  std::vector<int32_t> rule_alternatives_{0};  // rule r: alternative_starts_[ra[r], ra[r+1])
  std::vector<ByteSet> byte_sets_;
  std::vector<std::string> rule_names_;
  int64_t num_elements_ = 0;
};

// Reads GBNF (llama.cpp's syntax): `name ::= alternatives` rules, one per line (a rule continues
// on the next line only inside parentheses or after `|`), names of letters, digits, `-` and `_`;
// "literals" and [classes] (with `^` negation and `a-z` ranges) with the escapes \t \r \n \\ \"
// \[ \] \- \xHH \uHHHH \UHHHHHHHH; `.` (any character); ( ) groups; `|`; the repetitions * + ?
// {m} {m,} {m,n}; # comments. `root` is the start rule. Errors are INVALID_ARGUMENT with the byte
// offset of the problem (syntax, an undefined rule, left recursion by rule name) or the limit
// exceeded (max_text_bytes, max_grammar_elements after expanding repetitions and classes,
// max_nesting_depth of parentheses).
absl::StatusOr<Grammar> ParseGbnf(std::string_view gbnf, const ConstraintLimits& limits);

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_H_
