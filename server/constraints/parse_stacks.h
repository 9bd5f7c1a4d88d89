// ParseStacks: the live parse stacks of a byte-level Grammar after some bytes — the state of a
// GrammarMatcher — and ParseStepper, which advances them by one byte.
//
// A stack is a sequence of grammar positions, bottom first: the top is the byte set the next
// byte must be in; the ones below are where to continue when the rule above ends. A call whose
// position is the last of its alternative pushes no return position (a tail call), so
// repetitions, which are right-recursive rules, do not grow the stack. The empty stack stands for
// a whole document. A set is canonical: stacks sorted lexicographically, no duplicates, so two
// sets describe the same state exactly when they are equal (the mask cache's key).
#ifndef LINSERVE_SERVER_CONSTRAINTS_PARSE_STACKS_H_
#define LINSERVE_SERVER_CONSTRAINTS_PARSE_STACKS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/constraints/grammar.h"

namespace linserve {

class ParseStacks {
 public:
  int32_t size() const { return static_cast<int32_t>(begins_.size()) - 1; }
  bool empty() const { return size() == 0; }
  absl::Span<const int32_t> stack(int32_t i) const {
    return absl::MakeConstSpan(positions_).subspan(begins_[i], begins_[i + 1] - begins_[i]);
  }
  // The set holds the empty stack: the bytes so far are a whole document.
  bool can_end() const { return can_end_; }
  // The bytes some stack accepts next.
  const ByteSet& next_bytes() const { return next_bytes_; }

  // Appends the set's canonical bytes (a cache key; not a stable format).
  void AppendKey(std::string* key) const;
  // A compact, stable encoding (varints: the number of stacks, then each stack's length and
  // positions), and back: Decode checks every position against `grammar` (a top must be a byte
  // set, a return position must follow a rule reference), the canonical order and the stack
  // limit. Errors are INVALID_ARGUMENT naming "constraint state".
  void Encode(std::string* out) const;
  static absl::StatusOr<ParseStacks> Decode(const Grammar& grammar, int32_t max_stacks,
                                            std::string_view* bytes);

  // Equal sets hash equal.
  size_t Hash() const;

  friend bool operator==(const ParseStacks& a, const ParseStacks& b) {
    return a.begins_ == b.begins_ && a.positions_ == b.positions_;
  }

 private:
  friend class ParseStepper;

  void Clear() {
    positions_.clear();
    begins_.resize(1);
    can_end_ = false;
    next_bytes_ = ByteSet();
  }
  void Append(absl::Span<const int32_t> stack) {
    positions_.insert(positions_.end(), stack.begin(), stack.end());
    begins_.push_back(static_cast<int32_t>(positions_.size()));
  }
  // Sets can_end_ and next_bytes_ from the stacks.
  void Summarize(const Grammar& grammar);

  std::vector<int32_t> positions_;
  std::vector<int32_t> begins_{0};
  bool can_end_ = false;
  ByteSet next_bytes_;
};

// Advances stack sets over one grammar. Holds scratch buffers, reused from step to step, so a
// step allocates nothing once they have grown. Not thread-safe.
class ParseStepper {
 public:
  // Expanding the stacks for one byte may take at most kWorkPerStack * max_stacks rule
  // expansions (bounds the work of grammars with exponentially many empty paths).
  static constexpr int64_t kWorkPerStack = 16;

  ParseStepper(const Grammar* grammar, int32_t max_stacks)
      : grammar_(grammar), max_stacks_(max_stacks) {}

  // The stacks at the start of a document.
  absl::Status Start(ParseStacks* out);
  // The stacks after `byte`; `out` (not `in`) is left empty when no stack accepts it.
  // RESOURCE_EXHAUSTED when more than max_stacks stacks (or too much work) would result.
  absl::Status Step(const ParseStacks& in, uint8_t byte, ParseStacks* out);

 private:
  // Expands current_ (and the alternatives it forks into) until every stack's top is a byte
  // set or the stack is empty, appending those to `out`.
  absl::Status Expand(ParseStacks* out);
  // Sorts and deduplicates `out`, checks the limit, summarizes.
  absl::Status Canonicalize(ParseStacks* out);

  const Grammar* grammar_;
  int32_t max_stacks_;
  int64_t work_ = 0;
  std::vector<int32_t> current_;
  std::vector<int32_t> pending_positions_;
  std::vector<int32_t> pending_begins_;
  std::vector<int32_t> order_;
  ParseStacks sorted_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_CONSTRAINTS_PARSE_STACKS_H_
