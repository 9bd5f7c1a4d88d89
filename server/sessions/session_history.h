// SessionHistory: a session's tokens as a continuation needs them, and the one place that
// changes them. Job and SessionStore go through its methods, so that at rest (no request
// running) num_tokens() == the state's position + pending().size() == the sum of the counts,
// the invariant a snapshot carries (snapshot.h). SessionStore::Snapshot checks it against the
// state before anything is exported or persisted.
//
// Not thread-safe: the engine thread owns every session.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_HISTORY_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_HISTORY_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "model/backend/backend.h"
#include "model/types.h"

namespace linserve {

class SessionHistory {
 public:
  SessionHistory() = default;
  // A history as a snapshot carries it; DecodeSnapshot has checked the fields agree.
  SessionHistory(int64_t num_tokens, std::vector<TokenId> pending,
                 absl::Span<const std::pair<TokenId, int64_t>> counts);

  // Tokens in the session: prompts (with a BOS) and generated ones.
  int64_t num_tokens() const { return num_tokens_; }
  // Tokens in the session the state has not consumed (the last one sent, or the rest of a
  // prompt a cancellation cut short); the next request feeds them first.
  const std::vector<TokenId>& pending() const { return pending_; }
  // At rest: the tokens the state has consumed.
  int64_t position() const { return num_tokens_ - static_cast<int64_t>(pending_.size()); }
  // Distinct tokens counted.
  size_t distinct_tokens() const { return counts_.size(); }
  // Occurrences of each token (for the penalties): unordered for a slot, ascending for a
  // snapshot.
  std::vector<TokenCount> SeenCounts() const;
  std::vector<std::pair<TokenId, int64_t>> SortedCounts() const;

  // A request starts: returns the pending tokens, to be fed first; they stay in the session.
  std::vector<TokenId> TakePending();
  // Tokens join the session (a BOS and a prompt, a generated token): counted.
  void Append(absl::Span<const TokenId> tokens);
  // A request ended: `unconsumed`, the session's last tokens the state has not consumed, are
  // pending again.
  void SetPending(std::vector<TokenId> unconsumed) { pending_ = std::move(unconsumed); }

  friend bool operator==(const SessionHistory&, const SessionHistory&) = default;

 private:
  std::vector<TokenId> pending_;
  absl::flat_hash_map<TokenId, int64_t> counts_;
  int64_t num_tokens_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_HISTORY_H_
