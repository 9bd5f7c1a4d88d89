#include "server/engine/session_store.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {

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

SessionStore::SessionStore(Backend& backend, const SessionStoreOptions& options)
    : backend_(backend), options_(options) {}

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
  session->create_time = now;
  session->last_use_time = now;
  auto [it, inserted] = sessions_.emplace(*id, std::move(session));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("session ", id->value, " already exists"));
  }
  (ephemeral ? ephemeral_ : named_) += 1;
  return it->second.get();
}

absl::StatusOr<Session*> SessionStore::Create(absl::Time now) {
  return NewSession(std::nullopt, /*ephemeral=*/false, now);
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

absl::StatusOr<Session*> SessionStore::Find(const SessionId& id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end() || it->second->ephemeral) {
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
  session.last_use_time = now;
  if (session.slot.has_value()) return absl::OkStatus();
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
  return &copy;
}

void SessionStore::Erase(Session* session) {
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

absl::StatusOr<Session*> SessionStore::Insert(SessionSnapshot snapshot,
                                              std::optional<SessionId> id, absl::Time now) {
  absl::StatusOr<Session*> session = NewSession(std::move(id), /*ephemeral=*/false, now);
  if (!session.ok()) return session.status();
  Session& s = **session;
  s.hibernated = std::move(snapshot.state);
  s.pending = std::move(snapshot.pending);
  s.token_counts.insert(snapshot.token_counts.begin(), snapshot.token_counts.end());
  s.num_tokens = snapshot.num_tokens;
  s.create_time = snapshot.create_time;
  return &s;
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
                                               int32_t limit) const {
  std::vector<const Session*> out;
  auto it = after.has_value() ? sessions_.upper_bound(*after) : sessions_.begin();
  for (; it != sessions_.end() && out.size() < static_cast<size_t>(limit); ++it) {
    if (!it->second->ephemeral) out.push_back(it->second.get());
  }
  return out;
}

bool SessionStore::HasAfter(const SessionId& after) const {
  for (auto it = sessions_.upper_bound(after); it != sessions_.end(); ++it) {
    if (!it->second->ephemeral) return true;
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
