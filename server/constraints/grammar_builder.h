// GrammarBuilder: the rules of a Grammar while ParseGbnf reads them (the user's rules by name,
// and the rules made for groups, repetitions and classes), then the checks grammar.h describes
// (every rule defined, none left-recursive, every user rule productive, dead alternatives
// dropped), the left-factoring and the flattening into a Grammar.
//
// Not thread-safe: one per parse.
#ifndef LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_BUILDER_H_
#define LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_BUILDER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/constraints/constraint_spec.h"
#include "server/constraints/grammar.h"
#include "server/constraints/utf8_ranges.h"

namespace linserve {

// INVALID_ARGUMENT "at byte <offset>: <message>", the form of every error ParseGbnf returns
// about the text.
absl::Status GbnfError(size_t offset, std::string_view message);

class GrammarBuilder {
 public:
  using Kind = Grammar::ElementKind;
  struct Elem {
    Kind kind;
    int32_t value;
  };
  using Sequence = std::vector<Elem>;

  explicit GrammarBuilder(const ConstraintLimits& limits) : limits_(limits) {}

  // Adds `elements` terminals and references to the grammar's count; INVALID_ARGUMENT at
  // `offset` once it exceeds limits.max_grammar_elements.
  absl::Status Count(int64_t elements, size_t offset);
  // The user rule `name`, declared (not yet defined) at `offset` when it is new.
  int32_t UserRule(std::string_view name, size_t offset);
  // Marks user rule `rule` defined at `offset`; INVALID_ARGUMENT when it already was.
  absl::Status Define(int32_t rule, size_t offset);
  // A new defined rule with no alternatives, belonging to user rule `owner` and named after it.
  int32_t NewRule(int32_t owner);
  std::vector<Sequence>& alternatives(int32_t rule) { return rules_[rule].alternatives; }
  // The index of `set` among the grammar's byte sets (added once).
  int32_t InternByteSet(const ByteSet& set);
  // A class (normalized code-point ranges) as one element: a byte set when it is ASCII only,
  // else a reference to a rule whose alternatives are its UTF-8 byte sequences (one rule per
  // distinct class, belonging to `owner`). Counted; `offset` is where a count error points.
  absl::StatusOr<Elem> LowerClass(CodePointRanges ranges, int32_t owner, size_t offset);

  // The checks, the left-factoring and the flattening; `end` (the text's length) is where an
  // error about a missing root points.
  absl::StatusOr<Grammar> Finish(size_t end);

 private:
  struct Rule {
    std::string name;
    int32_t owner = -1;             // the user rule a generated rule belongs to; itself if user
    bool defined = false;
    size_t offset = 0;              // where it was defined (or first referenced)
    std::vector<Sequence> alternatives;
  };

  // Left-factors every rule: alternatives that begin with the same element share their longest
  // common prefix, followed by a new rule of their rests, and duplicates go. The language is the
  // same, and a matcher holds one stack per distinct next element rather than one per
  // alternative (an enum of 2000 strings needs a few stacks, not 2000). Runs after the checks,
  // so their errors name the rules as written; it adds no left recursion (a new rule's first
  // elements were its parent's).
  void LeftFactor();

  const ConstraintLimits& limits_;
  int64_t elements_ = 0;
  std::vector<Rule> rules_;
  absl::flat_hash_map<std::string, int32_t> names_;
  std::vector<ByteSet> sets_;
  absl::flat_hash_map<std::array<uint64_t, 4>, int32_t> byte_set_index_;
  std::map<CodePointRanges, int32_t> class_rules_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_BUILDER_H_
