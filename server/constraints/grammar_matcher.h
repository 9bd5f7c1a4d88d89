// GrammarMatcher: where one constrained document stands — the parse stacks of its grammar after
// the bytes generated so far — and which tokens may come next. Copyable: a fork copies it.
//
// Not thread-safe: one per document, on the engine thread.
#ifndef LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_MATCHER_H_
#define LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/types.h"
#include "server/constraints/compiled_constraint.h"
#include "server/constraints/parse_stacks.h"

namespace linserve {

class GrammarMatcher {
 public:
  // At the start of a document.
  explicit GrammarMatcher(std::shared_ptr<const CompiledConstraint> constraint);

  const CompiledConstraint& constraint() const;

  // Writes the tokens allowed next: vocabulary().mask_words() words, bit set = allowed. A token
  // is allowed exactly when its bytes keep the document a prefix of a valid one; EOS exactly when
  // the document may end here (CanEnd). RESOURCE_EXHAUSTED when the grammar's ambiguity needs
  // more than limits().max_matcher_stacks stacks. Uses and fills the constraint's mask cache.
  absl::Status FillMask(absl::Span<uint32_t> mask) const;
  // The document continues with `token` (EOS: it ends, only where CanEnd()). INVALID_ARGUMENT
  // when the token is not allowed (the document is left unchanged); RESOURCE_EXHAUSTED as
  // FillMask.
  absl::Status Accept(TokenId token);
  // The bytes so far are a whole document.
  bool CanEnd() const;
  // A whole document that nothing may extend: generation stops here.
  bool IsComplete() const;
  // EOS was accepted.
  bool ended() const;

  // The matcher's position as bytes (ConstraintState::matcher), and back. Deserialize checks
  // every field against the constraint's grammar (INVALID_ARGUMENT naming "constraint state"):
  // each position inside it, each stack's top a byte set, each position below it a return point
  // after a rule reference, the canonical order, max_matcher_stacks. So bytes from a snapshot
  // can neither crash the matcher nor leave the grammar's positions; it does not check that a
  // return point belongs to the rule the position above it is in, so a forged snapshot may
  // continue a document the grammar would not have begun (its own session's output only).
  std::string Serialize() const;
  static absl::StatusOr<GrammarMatcher> Deserialize(
      std::shared_ptr<const CompiledConstraint> constraint, std::string_view bytes);

 private:
  // Walks the vocabulary's trie from stacks_, setting the bits of the tokens whose bytes the
  // stacks accept; a subtree is left at its first rejected byte, and a node's stacks are only
  // computed when it has children. The stack sets met on the way are numbered, and each
  // (set, byte) step is computed once per walk: inside a JSON string, say, every completed
  // character leads back to the same set, so most nodes cost a table lookup.
  absl::Status WalkTrie(absl::Span<uint32_t> mask) const;
  // The number of `stacks` among the walk's sets, adding it (swapped out of `stacks`) if new.
  int32_t Intern(ParseStacks& stacks) const;

  std::shared_ptr<const CompiledConstraint> constraint_;
  ParseStacks stacks_;
  bool ended_ = false;
  // Scratch, reused between calls so that a step allocates nothing once grown.
  mutable ParseStepper stepper_;
  mutable std::vector<ParseStacks> scratch_;  // Accept's two sets, the walk's next one
  mutable std::string key_;
  // The walk's numbered sets (the first count of sets), their index by hash (chained through
  // next), their steps ((set << 8 | byte) -> set) and the set at each trie depth. A copy of the
  // matcher (a fork) starts with none.
  struct Walk {
    Walk() = default;
    Walk(const Walk&) {}
    Walk& operator=(const Walk&) { return *this; }

    std::vector<ParseStacks> sets;
    int32_t count = 0;
    absl::flat_hash_map<size_t, int32_t> by_hash;
    std::vector<int32_t> next;
    absl::flat_hash_map<int64_t, int32_t> steps;
    std::vector<int32_t> levels;
  };
  mutable Walk walk_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_GRAMMAR_MATCHER_H_
