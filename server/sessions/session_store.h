// SessionStore: every session's recurrent state and what a continuation needs (snapshot.h), in
// three tiers, least recently used first out of each:
//
//   state slots (the Backend's pool) -> host memory (host_state_memory_mib) -> disk (state_dir)
//
// A session takes a slot only while it is used; when a slot is needed and none is free, the
// least recently used idle resident session is hibernated: its state copied to host memory, its
// slot freed. When the sessions in host memory outgrow the budget, the least recently used idle
// ones leave it for the disk tier: with a SessionPersister every change of a session is already
// written behind, so evicting one frees its memory and keeps a small index entry (id, tenant,
// token count, times: what lookups, listing and expiry need). A session on disk is read back
// on its next use (a request, a fork, an export). Restore at start reads only the index from
// the files, and loads the most recently used sessions into the free slots.
//
// Without a persister the host tier is the last one, and its budget is a hard limit, as
// vLLM's --swap-space and llama.cpp's fixed slot pool are: a session is never dropped to make
// room. A hibernation that does not fit is refused (the request that needed the slot fails
// with RESOURCE_EXHAUSTED naming the flag), and so are a create, fork or import that does not.
//
// A new session starts without a slot (its state is all zeros) and so does a restored or
// imported one. Sessions unused for idle_timeout are deleted; at most max_sessions named
// sessions exist at once, and at most tenant_max_sessions of one tenant. Each tenant's session
// ids are indexed apart, so listing a tenant's sessions costs what that tenant's sessions cost.
//
// With a SessionPersister (--state_dir) every change of a named session is handed to it as it
// happens (create, fork, insert, the end of each request, an export's touch, erase, expiry),
// and WhenDurable tells the caller when the changes so far are on disk; Restore indexes them.
// Servers may share the directory (replicas behind a proxy): a lookup of an id the store does
// not hold reads its record from the directory if one is there, so the server a proxy routes a
// session to after another stopped takes it over; a lookup of a loaded idle session whose file
// another server changed since reads it again (or drops it when another removed it), so a
// session that comes back is never served from a stale copy; and a proposed id that a session
// in the directory has is refused. See Find.
//
// Servers sharing the directory each change a session only while holding its lock
// (session_locks.h): every call that finds, creates or expires a named session takes the lock
// first (UNAVAILABLE when another server holds it), so a copy checked after that is current.
// The caller gives those uses back with SettleLocks once its operation has handed its changes to
// the persister (each queued change keeps its own use until written); a busy session's use is
// kept until its request ends (Release). Expiry re-reads a session's file before deleting it:
// one another server used since is not idle. A loaded copy replaced by another server's version,
// or of another tenant, is dropped; the callback set by set_on_replaced hears of it.
//
// A Session* stays valid while its session is busy, and otherwise until the next call that
// may move sessions between tiers (any non-const call).
//
// No threads and no locking: the engine thread owns the store and calls every method.
#ifndef LINSERVE_SERVER_SESSIONS_SESSION_STORE_H_
#define LINSERVE_SERVER_SESSIONS_SESSION_STORE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "model/backend/backend.h"
#include "model/types.h"
#include "server/constraints/constraint_spec.h"
#include "server/metrics/metrics.h"
#include "server/sessions/session_history.h"
#include "server/sessions/session_id.h"
#include "server/sessions/session_persister.h"
#include "server/sessions/snapshot.h"

namespace linserve {

struct SessionStoreOptions {
  // Named sessions (in a slot, in host memory or on disk) held at once; creating, forking or
  // importing beyond it fails with RESOURCE_EXHAUSTED. Ephemeral sessions do not count. Default:
  // 4096.
  int32_t max_sessions = 4096;
  // Named sessions one tenant may hold at once, within max_sessions; creating, forking,
  // importing or adopting beyond it fails with RESOURCE_EXHAUSTED naming tenant_max_sessions.
  // 0: no quota of its own (max_sessions alone applies). In [0, max_sessions]. Default: 0.
  int32_t tenant_max_sessions = 0;
  // A named session unused for this long is deleted; absl::InfiniteDuration() = never.
  // Default: 1 hour.
  absl::Duration idle_timeout = absl::Hours(1);
  // Host memory for the sessions not in a slot, in MiB: their states, pending tokens and
  // counts, and a fixed overhead per session (kSessionHostOverheadBytes). With a state_dir the
  // least recently used beyond it go to disk; without one it is a hard limit (see above).
  // 0 with a state_dir: idle sessions go from their slot straight to disk. In
  // [0, kMaxHostStateMemoryMib]. Default: 4096 (vLLM's --swap-space default is 4 GiB).
  int64_t host_state_memory_mib = 4096;
};

inline constexpr int64_t kMaxHostStateMemoryMib = int64_t{1} << 24;  // 16 TiB
// What a session in host memory is charged besides its state, pending tokens and counts.
inline constexpr int64_t kSessionHostOverheadBytes = 256;

// Errors name the field and its range.
absl::Status ValidateSessionStoreOptions(const SessionStoreOptions& options);

// Where a SessionStore counts its events (metrics.h); they must outlive the store. nullptr
// counts nothing.
struct SessionStoreCounters {
  // Sessions moved from a slot to host memory, from host memory to disk, and read back from
  // disk.
  Counter* hibernations = nullptr;
  Counter* evictions_to_disk = nullptr;
  Counter* loads_from_disk = nullptr;
  // Creates, forks, imports, adoptions and restores refused for tenant_max_sessions.
  Counter* tenant_quota_rejections = nullptr;
};

struct Session {
  SessionId id;
  // The tenant that created or imported the session; "" without authentication. Lookups on
  // behalf of anyone else answer NOT_FOUND.
  std::string tenant;
  // Ephemeral sessions serve one request without a session_id; they are invisible to lookups.
  bool ephemeral = false;
  // Resident: the slot holding the state. Otherwise `hibernated` holds it, or, when that is
  // empty too, the state is all zeros (a session that never ran).
  std::optional<SlotId> slot;
  std::optional<StateBlob> hibernated;
  // Its tokens: count, pending ones, occurrences (for the penalties).
  SessionHistory history;
  // The constrained document its last request left (structured output), if any.
  std::optional<ConstraintState> constraint;
  absl::Time create_time;
  absl::Time last_use_time;
  // Set while a request owns the session; busy sessions never change tier and never expire.
  bool busy = false;
  std::string busy_request_id;

  // The store's bookkeeping while the session is in host memory: its place in the LRU order
  // and the bytes charged for it.
  std::list<Session*>::iterator host_lru;
  int64_t host_bytes = 0;
};

// A session as clients see it.
struct SessionInfo {
  SessionId id;
  int64_t num_tokens = 0;
  bool resident = false;
  bool busy = false;
  absl::Time create_time;
  absl::Time last_use_time;
  // The num_tokens RewindSession and ForkSessionAt can return to, ascending (0 always); the
  // engine fills it from its TurnBoundaries (the store leaves it empty).
  std::vector<int64_t> boundaries = {};
};

class SessionStore {
 public:
  // `backend` and `persister` (nullptr: nothing persisted) must outlive the store. Slots of
  // remaining sessions are freed on destruction.
  SessionStore(Backend& backend, const SessionStoreOptions& options,
               SessionPersister* persister = nullptr, const SessionStoreCounters& counters = {});
  ~SessionStore();
  SessionStore(const SessionStore&) = delete;
  SessionStore& operator=(const SessionStore&) = delete;

  // A new empty named session of `tenant`, under `id` (ALREADY_EXISTS when a session, held or in
  // the persister's directory, has it) or a fresh random id. RESOURCE_EXHAUSTED at
  // max_sessions or the tenant's tenant_max_sessions, or without a persister when host memory
  // has no room.
  absl::StatusOr<Session*> Create(absl::Time now, std::string tenant = "",
                                  std::optional<SessionId> id = std::nullopt);
  // A new empty ephemeral session, resident at once (busy, since a request owns it).
  // RESOURCE_EXHAUSTED when no slot can be freed.
  absl::StatusOr<Session*> CreateEphemeral(absl::Time now);
  // The named session `id` of `tenant`, in a slot or in host memory (read back from disk if it
  // was there). An id the store does not hold is looked up in the persister's directory
  // (Adopt): the session of another server sharing the directory is found on its first use.
  // NOT_FOUND (naming the id) for unknown and ephemeral ids, and for sessions of another tenant
  // (the same message: existence is not revealed); DATA_LOSS when its record cannot be read
  // back (the session is then dropped from the index, its file left in place);
  // RESOURCE_EXHAUSTED at max_sessions or tenant_max_sessions for a session adopted from the
  // directory. A loaded idle session whose file another server changed or removed since is read
  // again (or NOT_FOUND).
  absl::StatusOr<Session*> Find(const SessionId& id, absl::string_view tenant = "");
  // What Find's session would show a client, without reading a session on disk back and
  // without its lock: a session the store does not hold, or that another server changed since,
  // is described from its file's header.
  absl::StatusOr<SessionInfo> Info(const SessionId& id, absl::string_view tenant = "");
  static SessionInfo InfoOf(const Session& session);

  // Gives the session a slot with its state, hibernating the least recently used idle resident
  // session if no slot is free. RESOURCE_EXHAUSTED when every slot belongs to a busy session
  // (SlotWaitHelps) or, without a persister, when host memory has no room for the hibernation.
  absl::Status MakeResident(Session& session, absl::Time now);
  // After MakeResident or CreateEphemeral failed with RESOURCE_EXHAUSTED: whether a slot can
  // be expected once a request in flight ends (false when only deleting or expiring sessions
  // would make room: the host tier is full and there is no disk tier).
  bool SlotWaitHelps() const;

  // A new named session with a copy of `source`'s state, pending tokens, counts and constraint
  // state. Copies slot to slot when a slot is free, else to host memory (hibernated).
  // RESOURCE_EXHAUSTED at max_sessions, or without a persister when host memory has no room for
  // the copy.
  absl::StatusOr<Session*> Fork(const Session& source, absl::Time now);

  // Deletes a session, frees its slot and removes its file. The caller checks it is not busy.
  void Erase(Session* session);
  // A request on `session` ended at `now`: not busy, last used now, persisted (an ephemeral
  // session is erased).
  void Release(Session& session, absl::Time now);
  // `session` was used at `now` without a request (an export).
  void Touch(Session& session, absl::Time now);
  // Runs `done` once every change made so far has been attempted (at once without a
  // persister): OK when the latest change of each of `ids` is on disk, else UNAVAILABLE (or
  // RESOURCE_EXHAUSTED for a full disk) naming the session, state_dir and the OS error. `done`
  // may run on the persister's thread; it must not block.
  void WhenDurable(std::vector<SessionId> ids, absl::AnyInvocable<void(absl::Status) &&> done);
  // Gives back the uses of session locks taken since the last call, except one per busy
  // session (given back by Release). Call after each operation on the engine thread.
  void SettleLocks();
  // Whether no write to the state directory is failing (true without a persister).
  bool writes_healthy() const { return persister_ == nullptr || persister_->healthy(); }
  // Called with the id of a session whose loaded copy was replaced by another server's
  // version, or dropped; turn boundaries and other per-history data of it are stale.
  void set_on_replaced(absl::AnyInvocable<void(const SessionId&)> on_replaced) {
    on_replaced_ = std::move(on_replaced);
  }
  // Indexes the sessions the persister holds (reading each file's header only), keeping every
  // field as persisted. Those idle for idle_timeout or more at `now` are not added and their
  // files are removed; those beyond max_sessions or their tenant's tenant_max_sessions are not
  // added and their files left in place. The most recently used ones are loaded into the free
  // slots (as the LRU would have kept them), the rest stay on disk until used. Returns the
  // number restored.
  int64_t Restore(absl::Time now);

  // The session's state and continuation data.
  absl::StatusOr<SessionSnapshot> Snapshot(const Session& session) const;
  // Its continuation data only (the state left empty, for an asynchronous read of its slot to
  // fill: Backend::StartReadSlot); the state must then be at session.history.position().
  SessionSnapshot SnapshotWithoutState(const Session& session) const;
  // A new named, hibernated session of `tenant` from an imported snapshot, under `id` (as
  // Create's) or a fresh id. RESOURCE_EXHAUSTED at max_sessions or the tenant's
  // tenant_max_sessions, or without a persister when host memory has no room.
  absl::StatusOr<Session*> Insert(SessionSnapshot snapshot, absl::Time now, std::string tenant = "",
                                  std::optional<SessionId> id = std::nullopt);

  // Deletes idle named sessions whose last use is idle_timeout or more before `now`; returns
  // their ids. Each call checks the next part of the index, by id, wrapping around: all of it
  // when it holds at most kExpiryScanAll sessions, else 1/kExpirySweepCalls of it, so that a
  // call costs a bounded slice of the engine thread (a whole scan of a million index entries
  // takes about 10 ms) and a session expires at most kExpirySweepCalls calls late.
  std::vector<SessionId> ExpireIdle(absl::Time now);
  static constexpr size_t kExpiryScanAll = 4096;
  static constexpr size_t kExpirySweepCalls = 60;

  // Up to `limit` named sessions of `tenant` with ids greater than `after` (all when nullopt),
  // by id; sessions on disk are described from the index. O(limit log n), whatever the other
  // tenants hold.
  std::vector<SessionInfo> List(const std::optional<SessionId>& after, int32_t limit,
                                absl::string_view tenant = "") const;
  // Whether a named session of `tenant` with an id greater than `after` exists.
  bool HasAfter(const SessionId& after, absl::string_view tenant = "") const;

  int32_t named_sessions() const { return static_cast<int32_t>(index_.size()); }
  // Named sessions of `tenant`.
  int32_t named_sessions(absl::string_view tenant) const;
  // Creates, forks, imports, adoptions and restores refused for tenant_max_sessions.
  int64_t tenant_quota_rejections() const { return tenant_quota_rejections_; }
  // Named sessions holding a slot / not holding one (in host memory or on disk).
  int32_t resident_named_sessions() const;
  int32_t hibernated_sessions() const { return named_sessions() - resident_named_sessions(); }
  // Named sessions in host memory, and the bytes charged for them.
  int32_t host_sessions() const { return static_cast<int32_t>(host_lru_.size()); }
  int64_t host_bytes() const { return host_bytes_; }
  // Named sessions only on disk.
  int32_t disk_sessions() const { return hibernated_sessions() - host_sessions(); }
  int32_t ephemeral_sessions() const { return static_cast<int32_t>(ephemeral_.size()); }
  // Moves from a slot to host memory, from host memory to disk, and reads back from disk.
  int64_t hibernations() const { return hibernations_; }
  int64_t evictions_to_disk() const { return evictions_to_disk_; }
  int64_t loads_from_disk() const { return loads_from_disk_; }

 private:
  // A named session as the index holds it. While the session is loaded (in a slot or in host
  // memory) `session` holds it and is authoritative; on disk only, the other fields describe it
  // (bench/results/sessions.md: 129 bytes of memory a session at a million).
  struct IndexEntry {
    std::unique_ptr<Session> session;
    uint32_t tenant = 0;  // in tenants_, kept while loaded too
    int64_t num_tokens = 0;
    int64_t create_micros = 0;
    int64_t last_use_micros = 0;
  };
  using Index = absl::btree_map<PackedSessionId, IndexEntry>;

  // Session clocks are kept at the microsecond resolution of the persisted record, so a restart
  // shows a client exactly the times it saw before.
  static absl::Time ToMicros(absl::Time t);
  // NOT_FOUND naming the id, the same whether it never existed or is another tenant's.
  static absl::Status NotFound(const SessionId& id);
  absl::StatusOr<Session*> NewNamed(std::optional<SessionId> id, absl::Time now,
                                    std::string tenant);
  // With a persister: takes a use of `id`'s lock for the current operation (SettleLocks).
  absl::Status HoldLock(const SessionId& id);
  // Drops the index entry of a session another server removed or replaced, without touching
  // its file. Returns the entry after it.
  Index::iterator Forget(Index::iterator it);
  // RESOURCE_EXHAUSTED naming max_sessions or tenant_max_sessions when `tenant` may not have
  // another session (counting a tenant_max_sessions refusal).
  absl::Status CheckCapacity(absl::string_view tenant);
  // Adds an index entry for `key` of `tenant` (found, not added, when `key` is taken); every
  // entry is added here and removed by RemoveEntry, which keep by_tenant_ in step.
  std::pair<Index::iterator, bool> AddEntry(const PackedSessionId& key, absl::string_view tenant);
  // Removes the entry from the index (nothing else); returns the entry after it.
  Index::iterator RemoveEntry(Index::iterator it);
  // ALREADY_EXISTS when a session the store does not hold has `id` in the persister's directory
  // (another server's, not expired): a proposed id must be new everywhere.
  absl::Status CheckIdFree(const SessionId& id, absl::Time now);
  // Hands the session's current record to the persister.
  void Persist(const Session& session);
  // A slot for `for_session`, hibernating an LRU idle session when none is free.
  absl::StatusOr<SlotId> AcquireSlot(Session* for_session);
  // Puts a non-resident session into a slot (its hibernated state and penalty counts, if any);
  // last_use_time is the caller's.
  absl::Status LoadIntoSlot(Session& session);
  absl::Status Hibernate(Session& session);
  void ReleaseSlot(Session& session);

  // Host memory: what `session` costs there (with a state when `with_state`, whether or not it
  // holds one yet), whether that fits, and the error naming the flag when it does not.
  int64_t HostCost(const Session& session, bool with_state) const;
  bool HostHasRoom(int64_t bytes) const;
  absl::Status HostFull(absl::string_view what) const;
  void AddToHost(Session& session);
  void RemoveFromHost(Session& session);
  // Marks a session in host memory as just used.
  void TouchInHost(Session& session);
  // With a persister: moves the least recently used idle sessions in host memory, except
  // `keep`, to disk until the host tier is within its budget.
  void EnforceHostBudget(const Session* keep);
  // Frees a loaded, idle, non-resident session's memory, leaving its index entry.
  void Unload(IndexEntry& entry);
  // Reads a session on disk back into host memory.
  absl::StatusOr<Session*> Load(Index::iterator it, absl::Time now);
  // Indexes and loads a session the persister's directory holds but the store does not.
  absl::StatusOr<Session*> Adopt(const SessionId& id, absl::string_view tenant, absl::Time now);
  // A session from a decoded record, or a snapshot, in host memory.
  std::unique_ptr<Session> FromSnapshot(SessionId id, std::string tenant,
                                        SessionSnapshot snapshot) const;
  // Returns the entry after it.
  Index::iterator EraseEntry(Index::iterator it);
  uint32_t InternTenant(absl::string_view tenant);
  // The tenant's number, nullopt when no session ever had it.
  std::optional<uint32_t> FindTenant(absl::string_view tenant) const;
  SessionInfo InfoOf(const Index::value_type& entry) const;

  Backend& backend_;
  const SessionStoreOptions options_;
  SessionPersister* const persister_;
  const SessionStoreCounters counters_;
  const int64_t host_budget_bytes_;
  Index index_;
  absl::flat_hash_map<Session*, std::unique_ptr<Session>> ephemeral_;
  absl::flat_hash_set<Session*> resident_;
  // Named sessions in host memory, least recently used first.
  std::list<Session*> host_lru_;
  int64_t host_bytes_ = 0;
  // Tenant names, interned: an index entry holds a number.
  std::vector<std::string> tenants_;
  absl::flat_hash_map<std::string, uint32_t> tenant_numbers_;
  // Each tenant's named session ids (by tenant number); tenants without sessions have no entry.
  absl::flat_hash_map<uint32_t, absl::btree_set<PackedSessionId>> by_tenant_;
  int64_t tenant_quota_rejections_ = 0;
  int64_t hibernations_ = 0;
  int64_t evictions_to_disk_ = 0;
  int64_t loads_from_disk_ = 0;
  // Where the next ExpireIdle goes on (nullopt: the beginning).
  std::optional<PackedSessionId> expiry_cursor_;
  // Lock uses taken by the current operation, and the sessions whose request holds one.
  std::vector<SessionId> op_locks_;
  absl::flat_hash_set<SessionId> busy_locks_;
  absl::AnyInvocable<void(const SessionId&)> on_replaced_ = [](const SessionId&) {};
};

}  // namespace linserve

#endif  // LINSERVE_SERVER_SESSIONS_SESSION_STORE_H_
