// SessionStore: every session's recurrent state, resident in a Backend slot or hibernated to
// host memory, plus what a continuation needs (see snapshot.h).
//
// The Backend's slot pool is the scarce resource. A session takes a slot only while it is used;
// when a slot is needed and none is free, the least recently used idle resident session is
// hibernated (its state copied to host memory, its slot freed) and is restored on its next use.
// A new session starts without a slot (its state is all zeros) and so does a restored or
// imported one. Sessions unused for idle_timeout are deleted; at most max_sessions named
// sessions exist at once.
//
// With a SessionPersister (--state_dir) every change of a named session is handed to it as it
// happens (create, fork, insert, the end of each request, an export's touch, erase, expiry),
// and WhenDurable tells the caller when the changes so far are on disk; Restore loads them back.
// Replicas may share the directory: Find and a proposed id in Create or Insert read a session
// this store does not hold from its file (load on first use), so the replica a proxy routes a
// session to after another stopped takes it over; and Find reads an idle session it holds again
// when another replica changed its file since (or drops it when another removed it), so a
// session that comes back to a replica is never served from a stale copy.
//
// No threads and no locking: the engine thread owns the store and calls every method.
#ifndef LINSERVE_SERVER_ENGINE_SESSION_STORE_H_
#define LINSERVE_SERVER_ENGINE_SESSION_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend.h"
#include "model/types.h"
#include "absl/functional/any_invocable.h"
#include "server/engine/session_id.h"
#include "server/engine/session_persister.h"
#include "server/engine/snapshot.h"

namespace linserve {

struct SessionStoreOptions {
  // Named sessions (resident or hibernated) held at once; creating, forking or importing
  // beyond it fails with RESOURCE_EXHAUSTED. Ephemeral sessions do not count. Default: 4096.
  int32_t max_sessions = 4096;
  // A named session unused for this long is deleted; absl::InfiniteDuration() = never.
  // Default: 1 hour.
  absl::Duration idle_timeout = absl::Hours(1);
};

// Errors name the field and its range.
absl::Status ValidateSessionStoreOptions(const SessionStoreOptions& options);

struct Session {
  SessionId id;
  // The tenant that created or imported the session; "" without authentication. Lookups on
  // behalf of anyone else answer NOT_FOUND.
  std::string owner;
  // Ephemeral sessions serve one request without a session_id; they are invisible to lookups.
  bool ephemeral = false;
  // Resident: the slot holding the state. Otherwise `hibernated` holds it, or, when that is
  // empty too, the state is all zeros (a session that never ran).
  std::optional<SlotId> slot;
  std::optional<StateBlob> hibernated;
  // Tokens in the session but not yet fed to the model (sent to the client last, or left by a
  // cancelled prompt); they are fed first on the next request.
  std::vector<TokenId> pending;
  // Occurrences of each token in the session (prompts and generated), for the penalties.
  absl::flat_hash_map<TokenId, int64_t> token_counts;
  // == state position + pending.size().
  int64_t num_tokens = 0;
  absl::Time create_time;
  absl::Time last_use_time;
  // Set while a request owns the session; busy sessions are never hibernated or expired.
  bool busy = false;
  std::string busy_request_id;
};

class SessionStore {
 public:
  // `backend` and `persister` (nullptr: nothing persisted) must outlive the store. Slots of
  // remaining sessions are freed on destruction.
  SessionStore(Backend& backend, const SessionStoreOptions& options,
               SessionPersister* persister = nullptr);
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A new empty named session of `owner`, under `id` (ALREADY_EXISTS when a session, held or in
  // the persister's directory, has it) or a fresh random id. RESOURCE_EXHAUSTED at
  // max_sessions.
  absl::StatusOr<Session*> Create(absl::Time now, std::string owner = "",
                                  std::optional<SessionId> id = std::nullopt);
  // A new empty ephemeral session, resident at once (busy, since a request owns it).
  // RESOURCE_EXHAUSTED when no slot can be freed.
  absl::StatusOr<Session*> CreateEphemeral(absl::Time now);
  // NOT_FOUND (naming the id) for unknown and ephemeral ids, and for sessions of another owner
  // (the same message: existence is not revealed). A session this store does not hold is read
  // from the persister's directory when its file is there (and not expired); an idle one it
  // holds is read again when another replica changed its file.
  absl::StatusOr<Session*> Find(const SessionId& id, absl::string_view owner = "");

  // Gives the session a slot with its state, hibernating the least recently used idle resident
  // session if no slot is free. RESOURCE_EXHAUSTED when every slot belongs to a busy session.
  absl::Status MakeResident(Session& session, absl::Time now);

  // A new named session with a copy of `source`'s state, pending tokens and counts. Copies slot
  // to slot when a slot is free, else to host memory (hibernated). RESOURCE_EXHAUSTED at
  // max_sessions.
  absl::StatusOr<Session*> Fork(const Session& source, absl::Time now);

  // Deletes a session, frees its slot and removes its file. The caller checks it is not busy.
  void Erase(Session* session);
  // A request on `session` ended at `now`: not busy, last used now, persisted (an ephemeral
  // session is erased).
  void Release(Session& session, absl::Time now);
  // `session` was used at `now` without a request (an export).
  void Touch(Session& session, absl::Time now);
  // Runs `done` once every change made so far is on disk (at once without a persister).
  // `done` may run on the persister's thread; it must not block.
  void WhenDurable(absl::AnyInvocable<void() &&> done);
  // Adds the sessions the persister holds, keeping every field as persisted. Those idle for
  // idle_timeout or more at `now` are not added and their files are removed. The most recently
  // used ones are loaded into the free slots (as the LRU would have kept them), the rest stay
  // hibernated. Returns the number restored.
  int64_t Restore(absl::Time now);

  // The session's state and continuation data.
  absl::StatusOr<SessionSnapshot> Snapshot(const Session& session) const;
  // A new named, hibernated session of `owner` from an imported snapshot, under `id` (as
  // Create's) or a fresh id. RESOURCE_EXHAUSTED at max_sessions.
  absl::StatusOr<Session*> Insert(SessionSnapshot snapshot, absl::Time now, std::string owner = "",
                                  std::optional<SessionId> id = std::nullopt);

  // Deletes idle named sessions whose last use is idle_timeout or more before `now`; returns
  // their ids.
  std::vector<SessionId> ExpireIdle(absl::Time now);

  // Up to `limit` named sessions of `owner` with ids greater than `after` (all when nullopt),
  // by id.
  std::vector<const Session*> List(const std::optional<SessionId>& after, int32_t limit,
                                   absl::string_view owner = "") const;
  // Whether a named session of `owner` with an id greater than `after` exists.
  bool HasAfter(const SessionId& after, absl::string_view owner = "") const;
  // Every named session, by id.
  std::vector<const Session*> All() const;

  int32_t named_sessions() const { return named_; }
  // Named sessions holding a slot / not holding one.
  int32_t resident_named_sessions() const;
  int32_t hibernated_sessions() const { return named_ - resident_named_sessions(); }
  int32_t ephemeral_sessions() const { return ephemeral_; }
  int64_t hibernations() const { return hibernations_; }

 private:
  absl::StatusOr<Session*> NewSession(std::optional<SessionId> id, bool ephemeral,
                                      absl::Time now);
  // Adds a persisted session as it was (hibernated). ALREADY_EXISTS when held,
  // RESOURCE_EXHAUSTED at max_sessions.
  absl::StatusOr<Session*> AddRecord(SessionRecord record, absl::Time now);
  // Adds the session of `id` from the persister's file when this store does not hold it and
  // the file is there and not expired; nothing otherwise (a file that cannot be read is
  // logged).
  void LoadOnFirstUse(const SessionId& id, absl::Time now);
  // LoadOnFirstUse for a session not held; for an idle one held whose file another replica
  // changed or removed, drops this copy and loads the file's.
  void SyncWithStateDir(const SessionId& id, absl::Time now);
  // Hands the session's current record to the persister.
  void Persist(const Session& session);
  // A slot for `for_session`, hibernating an LRU idle session when none is free.
  absl::StatusOr<SlotId> AcquireSlot(const Session* for_session);
  // Puts a non-resident session into a slot (its hibernated state and penalty counts, if any);
  // last_use_time is the caller's.
  absl::Status LoadIntoSlot(Session& session);
  absl::Status Hibernate(Session& session);
  void ReleaseSlot(Session& session);

  Backend& backend_;
  const SessionStoreOptions options_;
  SessionPersister* const persister_;
  absl::btree_map<SessionId, std::unique_ptr<Session>> sessions_;
  absl::flat_hash_set<Session*> resident_;
  int32_t named_ = 0;
  int32_t ephemeral_ = 0;
  int64_t hibernations_ = 0;
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_ENGINE_SESSION_STORE_H_
