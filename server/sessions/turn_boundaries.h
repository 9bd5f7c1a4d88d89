// TurnBoundaries: the turn-boundary states each named session keeps, so that
// RewindSession returns it exactly to one and ForkSession can branch from one, without
// re-reading anything.
//
// A boundary is the session as it stood when a request on it ended: its state, pending tokens
// and penalty counts (a SessionSnapshot), named by the session's num_tokens then. Each session
// keeps its newest `per_session` boundaries, the sessions of one tenant together at
// most `tenant_budget_bytes` (that tenant's oldest boundaries go first, so that one tenant's
// turns cannot push out another's), and all sessions together at most `memory_budget_bytes`
// (the oldest boundaries of any session go first). The empty session
// (num_tokens 0) is always a boundary and costs nothing. Boundaries live in host memory only:
// a restart (state_dir) brings sessions back without them.
//
// No threads and no locking: the engine thread owns it.
#ifndef LINSERVE_SERVER_SESSIONS_TURN_BOUNDARIES_H_
#define LINSERVE_SERVER_SESSIONS_TURN_BOUNDARIES_H_

#include <cstdint>
#include <list>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/sessions/session_id.h"
#include "server/sessions/snapshot.h"

namespace linserve {

struct TurnBoundaryOptions {
  // Boundaries kept per session, the newest; 0 keeps none (only the empty session can be
  // rewound to). Default: 8.
  int32_t per_session = 8;
  // Host memory all sessions' boundaries may hold. Default: 1 GiB.
  int64_t memory_budget_bytes = int64_t{1} << 30;
  // Host memory the boundaries of one tenant's sessions may hold, within memory_budget_bytes. 0:
  // no budget of its own (memory_budget_bytes alone applies). In [0, memory_budget_bytes].
  // Default: 0.
  int64_t tenant_budget_bytes = 0;
};

// Errors are INVALID_ARGUMENT naming the field and its range.
absl::Status ValidateTurnBoundaryOptions(const TurnBoundaryOptions& options);

class TurnBoundaries {
 public:
  explicit TurnBoundaries(const TurnBoundaryOptions& options);
  TurnBoundaries(const TurnBoundaries&) = delete;
  TurnBoundaries& operator=(const TurnBoundaries&) = delete;

  // Keeps `boundary` for session `id` of `tenant` (replacing one with the same num_tokens),
  // dropping that session's oldest beyond per_session, the tenant's oldest beyond
  // tenant_budget_bytes and any session's oldest beyond the whole budget. A boundary larger
  // than the tenant's budget is not kept.
  void Add(absl::string_view tenant, const SessionId& id, SessionSnapshot boundary);
  // The session as it stood at `num_tokens`: a kept boundary, or the empty session for 0 (of
  // `state_floats` zeros). INVALID_ARGUMENT naming num_tokens and the kept boundaries
  // otherwise.
  absl::StatusOr<SessionSnapshot> At(const SessionId& id, int64_t num_tokens,
                                     int64_t state_floats) const;
  // The num_tokens of the session's boundaries, 0 first, ascending.
  std::vector<int64_t> Boundaries(const SessionId& id) const;
  // Forgets the session's boundaries after `num_tokens` (another branch continues from there).
  void DropAfter(const SessionId& id, int64_t num_tokens);
  // Forgets the session.
  void Erase(const SessionId& id);

  // Host bytes held, by all boundaries or by `tenant`'s.
  int64_t bytes() const { return bytes_; }
  int64_t bytes(absl::string_view tenant) const;

 private:
  struct Boundary {
    SessionId id;
    std::string tenant;
    SessionSnapshot snapshot;
    int64_t bytes = 0;
    // Its place in its tenant's order.
    uint64_t sequence = 0;
  };
  using BoundaryList = std::list<Boundary>;
  // One tenant's boundaries: their bytes, and the boundaries by sequence (oldest first).
  struct TenantShare {
    int64_t bytes = 0;
    absl::btree_map<uint64_t, BoundaryList::iterator> oldest_first;
  };
  void Remove(BoundaryList::iterator it);

  const TurnBoundaryOptions options_;
  // Every boundary, oldest first.
  BoundaryList all_;
  // Each session's boundaries, oldest first.
  absl::flat_hash_map<SessionId, std::vector<BoundaryList::iterator>> by_session_;
  // Tenants holding boundaries.
  absl::flat_hash_map<std::string, TenantShare> tenants_;
  uint64_t next_sequence_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_TURN_BOUNDARIES_H_
