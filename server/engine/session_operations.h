// SessionOperations: the engine's nine session operations (create, get, list, fork, fork at a
// turn boundary, rewind, delete, export, import), each run on the engine thread through the
// inbox, between two steps, so that none races a generation.
//
// Each acts on behalf of `tenant`, the tenant the transport authenticated ("" without
// authentication): a session of another tenant answers NOT_FOUND with the very message of an
// unknown id (existence is not revealed), lists hold only the tenant's sessions, and created,
// forked and imported sessions belong to `tenant`. Errors: NOT_FOUND, ABORTED (a request is
// running on the session), RESOURCE_EXHAUSTED (max_sessions, tenant_max_sessions, queue full,
// tenant_max_queued), UNAVAILABLE (shutting down).
//
// A reply waits until the operation's change is on disk (with a state_dir), and the session
// locks an operation took go back before its client hears of it: a client that heard back may
// go to another replica next.
//
// Thread-safe to call; the work runs on the engine thread.
#ifndef LINSERVE_SERVER_ENGINE_SESSION_OPERATIONS_H_
#define LINSERVE_SERVER_ENGINE_SESSION_OPERATIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/backend/backend.h"
#include "model/model.h"
#include "server/constraints/compiled_constraint.h"
#include "server/engine/inbox.h"
#include "server/engine/slot_reads.h"
#include "server/sessions/session_id.h"
#include "server/sessions/session_store.h"
#include "server/sessions/snapshot.h"
#include "server/sessions/turn_boundaries.h"

namespace linserve {

struct SessionPage {
  std::vector<SessionInfo> sessions;
  // Pass as `after` to get the next page; nullopt on the last page.
  std::optional<SessionId> next_after;
};

// Checks a snapshot's constraint state for this server: its spec compiles through `cache` and
// its matcher bytes are a position the grammar leads to (GrammarMatcher::Deserialize).
// INVALID_ARGUMENT naming "snapshot constraint" otherwise.
absl::Status CheckSnapshotConstraint(ConstraintCache& cache, const ConstraintState& state);

class SessionOperations {
 public:
  // Completion callbacks run on the engine thread, on the persister's thread once a change is
  // durable (with a state_dir), or on the calling thread when the operation is rejected at
  // once (queue full, shutting down). They must not block.
  template <typename T>
  using Callback = absl::AnyInvocable<void(absl::StatusOr<T>) &&>;
  using StatusCallback = absl::AnyInvocable<void(absl::Status) &&>;

  // Everything given must outlive this; the store and the boundaries are the engine thread's.
  // `max_prompt_tokens` bounds an imported snapshot's pending tokens; `constraints` checks its
  // constraint state.
  // Every operation first lands the slot reads in flight (`reads`): the turn boundaries it
  // sees or changes are all there.
  SessionOperations(Inbox& inbox, SessionStore& store, TurnBoundaries& boundaries,
                    SlotReads& reads, Backend& backend, const Model& model,
                    ConstraintCache& constraints, int32_t max_prompt_tokens);
  SessionOperations(const SessionOperations&) = delete;
  SessionOperations& operator=(const SessionOperations&) = delete;

  // `id`: the client's proposed id (validated by the caller); ALREADY_EXISTS when taken, here
  // or in state_dir. nullopt: a fresh random id.
  void Create(std::string tenant, Callback<SessionInfo> done, std::optional<SessionId> id);
  void Get(std::string tenant, SessionId id, Callback<SessionInfo> done);
  // `limit` >= 1.
  void List(std::string tenant, std::optional<SessionId> after, int32_t limit,
            Callback<SessionPage> done);
  void Fork(std::string tenant, SessionId id, Callback<SessionInfo> done);
  // A fork of the session as it stood at `num_tokens`, one of its kept turn boundaries
  // (SessionInfo::boundaries) or its current length. INVALID_ARGUMENT naming num_tokens and
  // the kept boundaries otherwise.
  void ForkAt(std::string tenant, SessionId id, int64_t num_tokens, Callback<SessionInfo> done);
  // Returns the session exactly to `num_tokens`, one of its kept turn boundaries or its
  // current length: state, pending tokens and penalty counts as they were then, so it
  // continues as it would have. Later boundaries are dropped. Errors as ForkAt's.
  void Rewind(std::string tenant, SessionId id, int64_t num_tokens, Callback<SessionInfo> done);
  void Delete(std::string tenant, SessionId id, StatusCallback done);
  // The session's snapshot (snapshot.h), which names no tenant.
  void Export(std::string tenant, SessionId id, Callback<std::string> done);
  // Decodes on the calling thread (rejecting corrupt or foreign snapshots, and constraint
  // states CheckSnapshotConstraint refuses, before anything changes), then adds the session
  // under `id` (as Create's) or a new one, of `tenant`.
  void Import(std::string tenant, absl::string_view snapshot, Callback<SessionInfo> done,
              std::optional<SessionId> id);

  // Engine thread: deletes a named session and its boundaries.
  void Erase(Session* session);

 private:
  // Queues `op` of `tenant` (Inbox::Post), which reports a rejection itself.
  void Post(Inbox::Op op, const std::string& tenant);
  // `done` that first gives back the session locks the operation took when it is called on the
  // engine thread (a reply that does not wait for a write).
  template <typename Done>
  Done SettleFirst(Done done);
  // Calls `done` with `value` once the session changes made so far are written, or with the
  // write's error when the latest change of one of the `changed` sessions could not be.
  template <typename T>
  void Reply(std::vector<SessionId> changed, Callback<T> done, T value);
  // What the store shows of the session, with its kept boundaries.
  SessionInfo InfoOf(const Session& session) const;
  // The session named `id` of `tenant`, checked idle.
  absl::StatusOr<Session*> FindIdle(const SessionId& id, absl::string_view tenant);
  // The session as it stood at `num_tokens` (a kept boundary, or now).
  absl::StatusOr<SessionSnapshot> SessionAt(const Session& session, int64_t num_tokens) const;

  Inbox& inbox_;
  SessionStore& store_;
  TurnBoundaries& boundaries_;
  SlotReads& reads_;
  Backend& backend_;
  const Model& model_;
  ConstraintCache& constraints_;
  const int32_t max_prompt_tokens_;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SESSION_OPERATIONS_H_
