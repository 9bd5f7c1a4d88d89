#include "server/sessions/session_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {

absl::Time SessionStore::ToMicros(absl::Time t) {
  return absl::FromUnixMicros(absl::ToUnixMicros(t));
}

absl::Status SessionStore::NotFound(const SessionId& id) {
  return absl::NotFoundError(
      absl::StrCat("session ", id.value, " does not exist (never created, deleted or expired)"));
}

absl::Status ValidateSessionStoreOptions(const SessionStoreOptions& options) {
  if (options.max_sessions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions must be >= 1, got ", options.max_sessions));
  }
  if (options.tenant_max_sessions < 0 || options.tenant_max_sessions > options.max_sessions) {
    return absl::InvalidArgumentError(
        absl::StrCat("tenant_max_sessions must be in [0, max_sessions = ", options.max_sessions,
                     "] (0: max_sessions alone), got ", options.tenant_max_sessions));
  }
  if (options.idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("session idle timeout must be > 0, got ",
                                                   absl::FormatDuration(options.idle_timeout)));
  }
  if (options.host_state_memory_mib < 0 || options.host_state_memory_mib > kMaxHostStateMemoryMib) {
    return absl::InvalidArgumentError(absl::StrCat("host_state_memory_mib must be in [0, ",
                                                   kMaxHostStateMemoryMib, "], got ",
                                                   options.host_state_memory_mib));
  }
  return absl::OkStatus();
}

SessionStore::SessionStore(Backend& backend, const SessionStoreOptions& options,
                           SessionPersister* persister, const SessionStoreCounters& counters)
    : backend_(backend),
      options_(options),
      persister_(persister),
      counters_(counters),
      host_budget_bytes_(options.host_state_memory_mib << 20) {}

SessionStore::~SessionStore() {
  for (Session* session : resident_) backend_.FreeSlot(*session->slot);
}

absl::Status SessionStore::CheckIdFree(const SessionId& id, absl::Time now) {
  if (persister_ == nullptr || index_.contains(Pack(id))) return absl::OkStatus();
  absl::StatusOr<SessionRecord> record = persister_->Read(id, now);
  if (record.ok() && now - record->last_use_time < options_.idle_timeout) {
    return absl::AlreadyExistsError(absl::StrCat("session ", id.value, " already exists"));
  }
  return absl::OkStatus();
}

// ---- Tenants --------------------------------------------------------------------------------

uint32_t SessionStore::InternTenant(absl::string_view tenant) {
  auto [it, inserted] =
      tenant_numbers_.try_emplace(std::string(tenant), static_cast<uint32_t>(tenants_.size()));
  if (inserted) tenants_.emplace_back(tenant);
  return it->second;
}

std::optional<uint32_t> SessionStore::FindTenant(absl::string_view tenant) const {
  auto it = tenant_numbers_.find(tenant);
  if (it == tenant_numbers_.end()) return std::nullopt;
  return it->second;
}

std::pair<SessionStore::Index::iterator, bool> SessionStore::AddEntry(const PackedSessionId& key,
                                                                      absl::string_view tenant) {
  auto [it, inserted] = index_.try_emplace(key);
  if (inserted) {
    it->second.tenant = InternTenant(tenant);
    by_tenant_[it->second.tenant].insert(key);
  }
  return {it, inserted};
}

SessionStore::Index::iterator SessionStore::RemoveEntry(Index::iterator it) {
  auto mine = by_tenant_.find(it->second.tenant);
  mine->second.erase(it->first);
  if (mine->second.empty()) by_tenant_.erase(mine);
  return index_.erase(it);
}

int32_t SessionStore::named_sessions(absl::string_view tenant) const {
  const std::optional<uint32_t> number = FindTenant(tenant);
  if (!number.has_value()) return 0;
  auto mine = by_tenant_.find(*number);
  return mine == by_tenant_.end() ? 0 : static_cast<int32_t>(mine->second.size());
}

// ---- Sessions ------------------------------------------------------------------------------

absl::Status SessionStore::CheckCapacity(absl::string_view tenant) {
  if (options_.tenant_max_sessions > 0 && named_sessions(tenant) >= options_.tenant_max_sessions) {
    ++tenant_quota_rejections_;
    Increment(counters_.tenant_quota_rejections);
    return absl::ResourceExhaustedError(
        absl::StrCat("this tenant holds tenant_max_sessions (", options_.tenant_max_sessions,
                     ") sessions, its quota; delete some or let idle ones expire"));
  }
  if (named_sessions() >= options_.max_sessions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the server holds max_sessions (", options_.max_sessions,
                     ") sessions; delete some or let idle ones expire"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Session*> SessionStore::NewNamed(std::optional<SessionId> id, absl::Time now,
                                                std::string tenant) {
  if (absl::Status s = CheckCapacity(tenant); !s.ok()) return s;
  const bool proposed = id.has_value();
  if (!proposed) {
    absl::StatusOr<SessionId> fresh = NewSessionId();
    if (!fresh.ok()) return fresh.status();
    id = *std::move(fresh);
  }
  if (absl::Status s = HoldLock(*id); !s.ok()) return s;
  // Under the lock, a proposed id another server's session has is seen for sure.
  if (proposed) {
    if (absl::Status s = CheckIdFree(*id, now); !s.ok()) return s;
  }
  auto [it, inserted] = AddEntry(Pack(*id), tenant);
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("session ", id->value, " already exists"));
  }
  auto session = std::make_unique<Session>();
  session->id = *std::move(id);
  session->tenant = std::move(tenant);
  session->create_time = ToMicros(now);
  session->last_use_time = ToMicros(now);
  it->second.session = std::move(session);
  return it->second.session.get();
}

absl::StatusOr<Session*> SessionStore::Create(absl::Time now, std::string tenant,
                                              std::optional<SessionId> id) {
  if (!HostHasRoom(kSessionHostOverheadBytes + static_cast<int64_t>(tenant.size()))) {
    return HostFull("a new session");
  }
  absl::StatusOr<Session*> session = NewNamed(std::move(id), now, std::move(tenant));
  if (!session.ok()) return session;
  AddToHost(**session);
  Persist(**session);
  EnforceHostBudget(*session);
  return session;
}

absl::StatusOr<Session*> SessionStore::CreateEphemeral(absl::Time now) {
  absl::StatusOr<SlotId> slot = AcquireSlot(nullptr);
  if (!slot.ok()) return slot.status();
  absl::StatusOr<SessionId> id = NewSessionId();
  if (!id.ok()) {
    backend_.FreeSlot(*slot);
    return id.status();
  }
  auto owned = std::make_unique<Session>();
  Session* session = owned.get();
  session->id = *std::move(id);
  session->ephemeral = true;
  session->create_time = ToMicros(now);
  session->last_use_time = ToMicros(now);
  session->slot = *slot;
  session->busy = true;
  ephemeral_.emplace(session, std::move(owned));
  resident_.insert(session);
  return session;
}

absl::StatusOr<Session*> SessionStore::Find(const SessionId& id, absl::string_view tenant) {
  const absl::Time now = absl::Now();
  // Before anything is checked: another server cannot change the session while it is held.
  if (absl::Status s = HoldLock(id); !s.ok()) return s;
  auto it = index_.find(Pack(id));
  if (it == index_.end()) return Adopt(id, tenant, now);
  IndexEntry& entry = it->second;
  if (tenants_[entry.tenant] != tenant) return NotFound(id);
  if (entry.session == nullptr) return Load(it, now);
  Session& held = *entry.session;
  if (held.busy || persister_ == nullptr || !persister_->ChangedElsewhere(id)) return &held;
  // Another server sharing the directory served the session since this one last wrote or read
  // it: its file wins (and a session it deleted is gone here too).
  spdlog::info("session {}: changed in state_dir by another replica; this copy dropped", id.value);
  if (held.slot.has_value()) {
    ReleaseSlot(held);
  } else {
    RemoveFromHost(held);
  }
  entry.session.reset();
  return Load(it, now);
}

absl::Status SessionStore::HoldLock(const SessionId& id) {
  if (persister_ == nullptr) return absl::OkStatus();
  if (absl::Status s = persister_->locks().Acquire(id); !s.ok()) return s;
  op_locks_.push_back(id);
  return absl::OkStatus();
}

void SessionStore::SettleLocks() {
  for (const SessionId& id : op_locks_) {
    auto it = index_.find(Pack(id));
    const Session* session = it != index_.end() ? it->second.session.get() : nullptr;
    // A request keeps one use until it ends.
    if (session != nullptr && session->busy && busy_locks_.insert(id).second) continue;
    persister_->locks().Release(id);
  }
  op_locks_.clear();
}

SessionStore::Index::iterator SessionStore::Forget(Index::iterator it) {
  const SessionId id = Unpack(it->first);
  if (Session* session = it->second.session.get(); session != nullptr) {
    if (session->slot.has_value()) {
      ReleaseSlot(*session);
    } else {
      RemoveFromHost(*session);
    }
  }
  it = RemoveEntry(it);
  on_replaced_(id);
  return it;
}

absl::StatusOr<SessionInfo> SessionStore::Info(const SessionId& id, absl::string_view tenant) {
  auto it = index_.find(Pack(id));
  if (it != index_.end() && (persister_ == nullptr || !persister_->ChangedElsewhere(id))) {
    if (tenants_[it->second.tenant] != tenant) return NotFound(id);
    return InfoOf(*it);
  }
  if (persister_ == nullptr) return NotFound(id);
  // Not held here, or another server sharing the directory changed it since: its file's header
  // says what the session is now (read without its lock: nothing here changes).
  on_replaced_(id);
  const absl::Time now = absl::Now();
  absl::StatusOr<SessionRecordHeader> header = persister_->ReadHeader(id, now);
  if (!header.ok() || header->tenant != tenant ||
      now - header->last_use_time >= options_.idle_timeout) {
    return NotFound(id);
  }
  return SessionInfo{.id = id,
                     .num_tokens = header->num_tokens,
                     .create_time = header->create_time,
                     .last_use_time = header->last_use_time};
}

SessionInfo SessionStore::InfoOf(const Session& session) {
  return SessionInfo{
      .id = session.id,
      .num_tokens = session.history.num_tokens(),
      .resident = session.slot.has_value(),
      .busy = session.busy,
      .create_time = session.create_time,
      .last_use_time = session.last_use_time,
  };
}

SessionInfo SessionStore::InfoOf(const Index::value_type& entry) const {
  if (entry.second.session != nullptr) return InfoOf(*entry.second.session);
  return SessionInfo{
      .id = Unpack(entry.first),
      .num_tokens = entry.second.num_tokens,
      .create_time = absl::FromUnixMicros(entry.second.create_micros),
      .last_use_time = absl::FromUnixMicros(entry.second.last_use_micros),
  };
}

absl::StatusOr<Session*> SessionStore::Fork(const Session& source, absl::Time now) {
  const bool slot_copy = source.slot.has_value() && backend_.free_slots() > 0;
  if (!slot_copy && !HostHasRoom(HostCost(source, /*with_state=*/true))) {
    return HostFull("the fork");
  }
  absl::StatusOr<Session*> fork = NewNamed(std::nullopt, now, source.tenant);
  if (!fork.ok()) return fork.status();
  Session& copy = **fork;
  copy.history = source.history;
  copy.constraint = source.constraint;
  absl::Status status;
  if (slot_copy) {
    absl::StatusOr<SlotId> slot = backend_.AllocateSlot();
    status = slot.status();
    if (status.ok()) {
      status = backend_.CopySlot(*source.slot, *slot);
      if (status.ok()) {
        copy.slot = *slot;
        resident_.insert(&copy);
      } else {
        backend_.FreeSlot(*slot);
      }
    }
  } else if (source.slot.has_value()) {
    StateBlob blob;
    status = backend_.ReadSlot(*source.slot, blob);
    if (status.ok()) copy.hibernated = std::move(blob);
  } else {
    copy.hibernated = source.hibernated;
  }
  if (!copy.slot.has_value()) AddToHost(copy);
  if (!status.ok()) {
    Erase(&copy);
    return status;
  }
  Persist(copy);
  EnforceHostBudget(&copy);
  return &copy;
}

void SessionStore::Erase(Session* session) {
  if (session->ephemeral) {
    ReleaseSlot(*session);
    ephemeral_.erase(session);
    return;
  }
  EraseEntry(index_.find(Pack(session->id)));
}

SessionStore::Index::iterator SessionStore::EraseEntry(Index::iterator it) {
  if (persister_ != nullptr) persister_->Remove(Unpack(it->first));
  if (Session* session = it->second.session.get(); session != nullptr) {
    if (session->slot.has_value()) {
      ReleaseSlot(*session);
    } else {
      RemoveFromHost(*session);
    }
  }
  return RemoveEntry(it);
}

absl::StatusOr<SessionSnapshot> SessionStore::Snapshot(const Session& session) const {
  SessionSnapshot snapshot = SnapshotWithoutState(session);
  if (session.slot.has_value()) {
    if (absl::Status status = backend_.ReadSlot(*session.slot, snapshot.state); !status.ok()) {
      return status;
    }
  } else if (session.hibernated.has_value()) {
    snapshot.state = *session.hibernated;
  } else {
    snapshot.state.position = 0;
    snapshot.state.state.assign(backend_.config().StateFloatsPerSlot(), 0.0f);
  }
  if (snapshot.state.position != session.history.position()) {
    return absl::InternalError(absl::StrCat(
        "session ", session.id.value, ": its state is at position ", snapshot.state.position,
        " but its history says ", session.history.num_tokens(), " tokens with ",
        session.history.pending().size(), " pending"));
  }
  return snapshot;
}

SessionSnapshot SessionStore::SnapshotWithoutState(const Session& session) const {
  SessionSnapshot snapshot;
  snapshot.pending = session.history.pending();
  snapshot.token_counts = session.history.SortedCounts();
  snapshot.num_tokens = session.history.num_tokens();
  snapshot.create_time = session.create_time;
  snapshot.constraint = session.constraint;
  return snapshot;
}

absl::StatusOr<Session*> SessionStore::Insert(SessionSnapshot snapshot, absl::Time now,
                                              std::string tenant, std::optional<SessionId> id) {
  absl::StatusOr<Session*> session = NewNamed(std::move(id), now, tenant);
  if (!session.ok()) return session.status();
  Session& s = **session;
  IndexEntry& entry = index_.find(Pack(s.id))->second;
  entry.session = FromSnapshot(s.id, std::move(tenant), std::move(snapshot));
  entry.session->last_use_time = ToMicros(now);
  Session& inserted = *entry.session;
  if (!HostHasRoom(HostCost(inserted, /*with_state=*/true))) {
    RemoveEntry(index_.find(Pack(inserted.id)));
    return HostFull("the imported session");
  }
  AddToHost(inserted);
  Persist(inserted);
  EnforceHostBudget(&inserted);
  return &inserted;
}

void SessionStore::Persist(const Session& session) {
  if (persister_ == nullptr || session.ephemeral) return;
  absl::StatusOr<SessionSnapshot> snapshot = Snapshot(session);
  if (!snapshot.ok()) {
    spdlog::error("session {}: not persisted: {}", session.id.value, snapshot.status().ToString());
    return;
  }
  persister_->Put(SessionRecord{.id = session.id,
                                .tenant = session.tenant,
                                .last_use_time = session.last_use_time,
                                .snapshot = *std::move(snapshot)});
}

void SessionStore::Release(Session& session, absl::Time now) {
  session.busy = false;
  session.busy_request_id.clear();
  session.last_use_time = ToMicros(now);
  if (session.ephemeral) {
    Erase(&session);
    return;
  }
  TouchInHost(session);
  Persist(session);
  if (busy_locks_.erase(session.id) > 0) persister_->locks().Release(session.id);
}

void SessionStore::Touch(Session& session, absl::Time now) {
  session.last_use_time = ToMicros(now);
  TouchInHost(session);
  Persist(session);
}

void SessionStore::WhenDurable(std::vector<SessionId> ids,
                               absl::AnyInvocable<void(absl::Status) &&> done) {
  if (persister_ == nullptr) return std::move(done)(absl::OkStatus());
  // The operation's changes are queued, each holding its session's lock until written: its
  // own uses go back now, so that the lock is free when `done` tells the client.
  SettleLocks();
  persister_->WhenDurable(
      std::move(ids), [done = std::move(done), dir = persister_->dir()](absl::Status s) mutable {
        if (s.ok()) return std::move(done)(absl::OkStatus());
        const std::string message =
            absl::StrCat("the change could not be written to state_dir ", dir, ": ", s.message(),
                         " (this server keeps it in memory and retries the write; it is lost if "
                         "the server stops first)");
        std::move(done)(absl::IsResourceExhausted(s) ? absl::ResourceExhaustedError(message)
                                                     : absl::UnavailableError(message));
      });
}

int64_t SessionStore::Restore(absl::Time now) {
  if (persister_ == nullptr) return 0;
  int64_t restored = 0;
  for (SessionRecordHeader& header : persister_->LoadIndex(now)) {
    if (now - header.last_use_time >= options_.idle_timeout) {
      // Under its lock: another server may be serving it right now.
      if (!HoldLock(header.id).ok()) continue;
      spdlog::info("session {}: expired while the server was down (last used {})", header.id.value,
                   absl::FormatTime(header.last_use_time));
      persister_->Remove(header.id);
      continue;
    }
    if (index_.contains(Pack(header.id))) continue;
    if (absl::Status s = CheckCapacity(header.tenant); !s.ok()) {
      spdlog::warn("state_dir: not restoring session {} (left in place): {}", header.id.value,
                   s.ToString());
      continue;
    }
    auto it = AddEntry(Pack(header.id), header.tenant).first;
    it->second.num_tokens = header.num_tokens;
    it->second.create_micros = absl::ToUnixMicros(header.create_time);
    it->second.last_use_micros = absl::ToUnixMicros(header.last_use_time);
    ++restored;
  }
  // Warm start: the most recently used sessions take the free slots, as they held them before.
  std::vector<std::pair<int64_t, PackedSessionId>> recent;
  recent.reserve(index_.size());
  for (const auto& [key, entry] : index_) recent.emplace_back(entry.last_use_micros, key);
  const size_t warm = std::min(recent.size(), static_cast<size_t>(backend_.free_slots()));
  std::partial_sort(recent.begin(), recent.begin() + static_cast<ptrdiff_t>(warm), recent.end(),
                    std::greater<>());
  for (size_t i = 0; i < warm; ++i) {
    auto it = index_.find(recent[i].second);
    if (it == index_.end() || it->second.session != nullptr) continue;
    absl::StatusOr<Session*> session = Load(it, now);
    if (!session.ok()) continue;  // logged, and dropped from the index
    if (absl::Status s = LoadIntoSlot(**session); !s.ok()) {
      spdlog::warn("session {}: restored but left in host memory: {}", (*session)->id.value,
                   s.ToString());
    }
  }
  return restored;
}

std::vector<SessionId> SessionStore::ExpireIdle(absl::Time now) {
  const int64_t cutoff = absl::ToUnixMicros(now - options_.idle_timeout);
  std::vector<SessionId> ids;
  const size_t budget = index_.size() <= kExpiryScanAll
                            ? index_.size()
                            : std::max(kExpiryScanAll, index_.size() / kExpirySweepCalls);
  auto it = expiry_cursor_.has_value() ? index_.lower_bound(*expiry_cursor_) : index_.begin();
  for (size_t scanned = 0; scanned < budget; ++scanned) {
    if (it == index_.end()) it = index_.begin();  // wraps around: the budget is at most the size
    const Session* session = it->second.session.get();
    const int64_t last_use = session != nullptr ? absl::ToUnixMicros(session->last_use_time)
                                                : it->second.last_use_micros;
    if ((session != nullptr && session->busy) || last_use > cutoff) {
      ++it;
      continue;
    }
    // With a shared directory, idle here is not idle everywhere: under the session's lock (held
    // elsewhere: in use there), its file says when it was last used by anyone.
    const SessionId id = Unpack(it->first);
    if (persister_ != nullptr) {
      if (!HoldLock(id).ok()) {
        ++it;
        continue;
      }
      absl::StatusOr<SessionRecordHeader> header = persister_->ReadHeader(id, now);
      if (absl::IsNotFound(header.status())) {  // another server deleted it
        it = Forget(it);
        continue;
      }
      if (header.ok() && absl::ToUnixMicros(header->last_use_time) > cutoff) {
        it->second.last_use_micros = absl::ToUnixMicros(header->last_use_time);
        if (session != nullptr) it->second.session->last_use_time = header->last_use_time;
        ++it;
        continue;
      }
    }
    ids.push_back(id);
    it = EraseEntry(it);
  }
  expiry_cursor_.reset();
  if (it != index_.end()) expiry_cursor_ = it->first;
  return ids;
}

std::vector<SessionInfo> SessionStore::List(const std::optional<SessionId>& after, int32_t limit,
                                            absl::string_view tenant) const {
  std::vector<SessionInfo> out;
  const std::optional<uint32_t> number = FindTenant(tenant);
  if (!number.has_value()) return out;
  auto mine = by_tenant_.find(*number);
  if (mine == by_tenant_.end()) return out;
  const absl::btree_set<PackedSessionId>& ids = mine->second;
  auto it = after.has_value() ? ids.upper_bound(Pack(*after)) : ids.begin();
  for (; it != ids.end() && out.size() < static_cast<size_t>(limit); ++it) {
    out.push_back(InfoOf(*index_.find(*it)));
  }
  return out;
}

bool SessionStore::HasAfter(const SessionId& after, absl::string_view tenant) const {
  const std::optional<uint32_t> number = FindTenant(tenant);
  if (!number.has_value()) return false;
  auto mine = by_tenant_.find(*number);
  return mine != by_tenant_.end() && mine->second.upper_bound(Pack(after)) != mine->second.end();
}

int32_t SessionStore::resident_named_sessions() const {
  return static_cast<int32_t>(resident_.size() - ephemeral_.size());
}

}  // namespace linserve
