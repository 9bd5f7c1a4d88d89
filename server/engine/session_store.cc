#include "server/engine/session_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {
namespace {

// Session clocks are kept at the microsecond resolution of the persisted record, so a restart
// shows a client exactly the times it saw before.
absl::Time ToMicros(absl::Time t) { return absl::FromUnixMicros(absl::ToUnixMicros(t)); }

}  // namespace

absl::Status ValidateSessionStoreOptions(const SessionStoreOptions& options) {
  if (options.max_sessions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions must be >= 1, got ", options.max_sessions));
  }
  if (options.idle_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session idle timeout must be > 0, got ", absl::FormatDuration(options.idle_timeout)));
  }
  return absl::OkStatus();
}

SessionStore::SessionStore(Backend& backend, const SessionStoreOptions& options,
                           SessionPersister* persister)
    : backend_(backend), options_(options), persister_(persister) {}

SessionStore::~SessionStore() {
  for (Session* session : resident_) backend_.FreeSlot(*session->slot);
}

absl::StatusOr<Session*> SessionStore::NewSession(std::optional<SessionId> id, bool ephemeral,
                                                  absl::Time now) {
  if (!ephemeral && named_ >= options_.max_sessions) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server holds max_sessions (", options_.max_sessions,
        ") sessions; delete some or let idle ones expire"));
  }
  if (!id.has_value()) {
    absl::StatusOr<SessionId> fresh = NewSessionId();
    if (!fresh.ok()) return fresh.status();
    id = *std::move(fresh);
  }
  auto session = std::make_unique<Session>();
  session->id = *id;
  session->ephemeral = ephemeral;
  session->create_time = ToMicros(now);
  session->last_use_time = ToMicros(now);
  auto [it, inserted] = sessions_.emplace(*id, std::move(session));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("session ", id->value, " already exists"));
  }
  (ephemeral ? ephemeral_ : named_) += 1;
  return it->second.get();
}

absl::StatusOr<Session*> SessionStore::Create(absl::Time now, std::string owner,
                                              std::optional<SessionId> id) {
  if (id.has_value()) LoadOnFirstUse(*id, now);
  absl::StatusOr<Session*> session = NewSession(std::move(id), /*ephemeral=*/false, now);
  if (!session.ok()) return session;
  (*session)->owner = std::move(owner);
  Persist(**session);
  return session;
}

absl::StatusOr<Session*> SessionStore::CreateEphemeral(absl::Time now) {
  absl::StatusOr<SlotId> slot = AcquireSlot(nullptr);
  if (!slot.ok()) return slot.status();
  absl::StatusOr<Session*> session = NewSession(std::nullopt, /*ephemeral=*/true, now);
  if (!session.ok()) {
    backend_.FreeSlot(*slot);
    return session.status();
  }
  (*session)->slot = *slot;
  (*session)->busy = true;
  resident_.insert(*session);
  return session;
}

absl::StatusOr<Session*> SessionStore::Find(const SessionId& id, absl::string_view owner) {
  SyncWithStateDir(id, absl::Now());
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->ephemeral || it->second->owner != owner) {
    return absl::NotFoundError(absl::StrCat("session ", id.value,
                                            " does not exist (never created, deleted or expired)"));
  }
  return it->second.get();
}

absl::StatusOr<SlotId> SessionStore::AcquireSlot(const Session* for_session) {
  if (backend_.free_slots() == 0) {
    Session* victim = nullptr;
    for (Session* candidate : resident_) {
      if (candidate->busy || candidate == for_session) continue;
      if (victim == nullptr || candidate->last_use_time < victim->last_use_time ||
          (candidate->last_use_time == victim->last_use_time && candidate->id < victim->id)) {
        victim = candidate;
      }
    }
    if (victim == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", backend_.slot_capacity(),
                       " state slots belong to sessions with requests in flight"));
    }
    if (absl::Status status = Hibernate(*victim); !status.ok()) return status;
  }
  return backend_.AllocateSlot();
}

absl::Status SessionStore::Hibernate(Session& session) {
  StateBlob blob;
  if (absl::Status status = backend_.ReadSlot(*session.slot, blob); !status.ok()) return status;
  session.hibernated = std::move(blob);
  ReleaseSlot(session);
  ++hibernations_;
  return absl::OkStatus();
}

void SessionStore::ReleaseSlot(Session& session) {
  if (!session.slot.has_value()) return;
  backend_.FreeSlot(*session.slot);
  session.slot.reset();
  resident_.erase(&session);
}

absl::Status SessionStore::MakeResident(Session& session, absl::Time now) {
  session.last_use_time = ToMicros(now);
  if (session.slot.has_value()) return absl::OkStatus();
  return LoadIntoSlot(session);
}

absl::Status SessionStore::LoadIntoSlot(Session& session) {
  absl::StatusOr<SlotId> slot = AcquireSlot(&session);
  if (!slot.ok()) return slot.status();
  if (session.hibernated.has_value()) {
    // The slot's penalty counts come back with the state, in O(distinct tokens).
    std::vector<TokenCount> counts;
    counts.reserve(session.token_counts.size());
    for (const auto& [token, count] : session.token_counts) counts.push_back({token, count});
    absl::Status status = backend_.WriteSlot(*slot, *session.hibernated);
    if (status.ok()) status = backend_.SetSeenCounts(*slot, counts);
    if (!status.ok()) {
      backend_.FreeSlot(*slot);
      return status;
    }
    session.hibernated.reset();
  }
  session.slot = *slot;
  resident_.insert(&session);
  return absl::OkStatus();
}

absl::StatusOr<Session*> SessionStore::Fork(const Session& source, absl::Time now) {
  absl::StatusOr<Session*> fork = NewSession(std::nullopt, /*ephemeral=*/false, now);
  if (!fork.ok()) return fork.status();
  Session& copy = **fork;
  copy.owner = source.owner;
  copy.pending = source.pending;
  copy.token_counts = source.token_counts;
  copy.num_tokens = source.num_tokens;
  absl::Status status;
  if (source.slot.has_value() && backend_.free_slots() > 0) {
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
  if (!status.ok()) {
    Erase(&copy);
    return status;
  }
  Persist(copy);
  return &copy;
}

void SessionStore::Erase(Session* session) {
  if (persister_ != nullptr && !session->ephemeral) persister_->Remove(session->id);
  ReleaseSlot(*session);
  (session->ephemeral ? ephemeral_ : named_) -= 1;
  const SessionId id = session->id;  // the key must outlive the node being erased
  sessions_.erase(id);
}

absl::StatusOr<SessionSnapshot> SessionStore::Snapshot(const Session& session) const {
  SessionSnapshot snapshot;
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
  snapshot.pending = session.pending;
  snapshot.token_counts.assign(session.token_counts.begin(), session.token_counts.end());
  std::sort(snapshot.token_counts.begin(), snapshot.token_counts.end());
  snapshot.num_tokens = session.num_tokens;
  snapshot.create_time = session.create_time;
  return snapshot;
}

absl::StatusOr<Session*> SessionStore::Insert(SessionSnapshot snapshot, absl::Time now,
                                              std::string owner, std::optional<SessionId> id) {
  if (id.has_value()) LoadOnFirstUse(*id, now);
  absl::StatusOr<Session*> session = NewSession(std::move(id), /*ephemeral=*/false, now);
  if (!session.ok()) return session.status();
  Session& s = **session;
  s.owner = std::move(owner);
  s.hibernated = std::move(snapshot.state);
  s.pending = std::move(snapshot.pending);
  s.token_counts.insert(snapshot.token_counts.begin(), snapshot.token_counts.end());
  s.num_tokens = snapshot.num_tokens;
  s.create_time = snapshot.create_time;
  Persist(s);
  return &s;
}

void SessionStore::Persist(const Session& session) {
  if (persister_ == nullptr || session.ephemeral) return;
  absl::StatusOr<SessionSnapshot> snapshot = Snapshot(session);
  if (!snapshot.ok()) {
    spdlog::error("session {}: not persisted: {}", session.id.value,
                  snapshot.status().ToString());
    return;
  }
  persister_->Put(SessionRecord{.id = session.id,
                                .owner = session.owner,
                                .last_use_time = session.last_use_time,
                                .snapshot = *std::move(snapshot)});
}

void SessionStore::Release(Session& session, absl::Time now) {
  session.busy = false;
  session.busy_request_id.clear();
  session.last_use_time = ToMicros(now);
  if (session.ephemeral) {
    Erase(&session);
  } else {
    Persist(session);
  }
}

void SessionStore::Touch(Session& session, absl::Time now) {
  session.last_use_time = ToMicros(now);
  Persist(session);
}

void SessionStore::WhenDurable(absl::AnyInvocable<void() &&> done) {
  if (persister_ == nullptr) return std::move(done)();
  persister_->WhenDurable([done = std::move(done)](absl::Status) mutable { std::move(done)(); });
}

int64_t SessionStore::Restore(absl::Time now) {
  if (persister_ == nullptr) return 0;
  int64_t restored = 0;
  for (SessionRecord& record : persister_->Load(now)) {
    if (now - record.last_use_time >= options_.idle_timeout) {
      spdlog::info("session {}: expired while the server was down (last used {})",
                   record.id.value, absl::FormatTime(record.last_use_time));
      persister_->Remove(record.id);
      continue;
    }
    const SessionId id = record.id;
    absl::StatusOr<Session*> session = AddRecord(std::move(record), now);
    if (!session.ok()) {
      spdlog::warn("state_dir: not restoring session {} (left in place): {}", id.value,
                   session.status().ToString());
      continue;
    }
    ++restored;
  }
  // Warm start: the most recently used sessions take the free slots, as they held them before.
  std::vector<Session*> by_last_use;
  for (const auto& [id, session] : sessions_) {
    if (!session->slot.has_value() && !session->ephemeral) by_last_use.push_back(session.get());
  }
  std::sort(by_last_use.begin(), by_last_use.end(), [](const Session* a, const Session* b) {
    return a->last_use_time > b->last_use_time;
  });
  for (Session* session : by_last_use) {
    if (backend_.free_slots() == 0) break;
    if (absl::Status s = LoadIntoSlot(*session); !s.ok()) {
      spdlog::warn("session {}: restored but left hibernated: {}", session->id.value,
                   s.ToString());
    }
  }
  return restored;
}

absl::StatusOr<Session*> SessionStore::AddRecord(SessionRecord record, absl::Time now) {
  absl::StatusOr<Session*> session = NewSession(record.id, /*ephemeral=*/false, now);
  if (!session.ok()) return session;
  Session& s = **session;
  s.owner = std::move(record.owner);
  s.hibernated = std::move(record.snapshot.state);
  s.pending = std::move(record.snapshot.pending);
  s.token_counts.insert(record.snapshot.token_counts.begin(), record.snapshot.token_counts.end());
  s.num_tokens = record.snapshot.num_tokens;
  s.create_time = record.snapshot.create_time;
  s.last_use_time = record.last_use_time;
  return session;
}

void SessionStore::LoadOnFirstUse(const SessionId& id, absl::Time now) {
  if (persister_ == nullptr || sessions_.contains(id)) return;
  absl::StatusOr<SessionRecord> record = persister_->LoadOne(id, now);
  if (!record.ok()) {
    if (!absl::IsNotFound(record.status())) {
      spdlog::warn("state_dir: session {} not loaded: {}", id.value, record.status().ToString());
    }
    return;
  }
  if (now - record->last_use_time >= options_.idle_timeout) return;
  absl::StatusOr<Session*> session = AddRecord(*std::move(record), now);
  if (!session.ok()) {
    spdlog::warn("state_dir: session {} not loaded: {}", id.value, session.status().ToString());
    return;
  }
  spdlog::info("session {}: loaded from state_dir on first use", id.value);
}

void SessionStore::SyncWithStateDir(const SessionId& id, absl::Time now) {
  if (persister_ == nullptr) return;
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return LoadOnFirstUse(id, now);
  Session& held = *it->second;
  if (held.ephemeral || held.busy || !persister_->ChangedElsewhere(id)) return;
  // Another replica served the session since this one last wrote or read it: its file wins.
  ReleaseSlot(held);
  named_ -= 1;
  sessions_.erase(it);
  spdlog::info("session {}: changed in state_dir by another replica; this copy dropped", id.value);
  LoadOnFirstUse(id, now);
}

std::vector<SessionId> SessionStore::ExpireIdle(absl::Time now) {
  std::vector<Session*> expired;
  for (const auto& [id, session] : sessions_) {
    if (!session->ephemeral && !session->busy &&
        now - session->last_use_time >= options_.idle_timeout) {
      expired.push_back(session.get());
    }
  }
  std::vector<SessionId> ids;
  for (Session* session : expired) {
    ids.push_back(session->id);
    Erase(session);
  }
  return ids;
}

std::vector<const Session*> SessionStore::List(const std::optional<SessionId>& after,
                                               int32_t limit, absl::string_view owner) const {
  std::vector<const Session*> out;
  auto it = after.has_value() ? sessions_.upper_bound(*after) : sessions_.begin();
  for (; it != sessions_.end() && out.size() < static_cast<size_t>(limit); ++it) {
    if (!it->second->ephemeral && it->second->owner == owner) out.push_back(it->second.get());
  }
  return out;
}

bool SessionStore::HasAfter(const SessionId& after, absl::string_view owner) const {
  for (auto it = sessions_.upper_bound(after); it != sessions_.end(); ++it) {
    if (!it->second->ephemeral && it->second->owner == owner) return true;
  }
  return false;
}

std::vector<const Session*> SessionStore::All() const {
  std::vector<const Session*> out;
  for (const auto& [id, session] : sessions_) {
    if (!session->ephemeral) out.push_back(session.get());
  }
  return out;
}

int32_t SessionStore::resident_named_sessions() const {
  return static_cast<int32_t>(resident_.size()) - ephemeral_;
}

}  // namespace linserve
