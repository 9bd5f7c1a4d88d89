// SessionStore's tiers (session_store.h): a session's moves between a state slot, host memory
// and disk, and what each costs.
#include "server/sessions/session_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace linserve {

// ---- Host memory and disk ------------------------------------------------------------------

int64_t SessionStore::HostCost(const Session& session, bool with_state) const {
  const int64_t state_bytes =
      with_state ? static_cast<int64_t>(backend_.config().StateFloatsPerSlot() * sizeof(float)) : 0;
  return kSessionHostOverheadBytes + state_bytes +
         static_cast<int64_t>(session.history.pending().size() * sizeof(TokenId) +
                              session.history.distinct_tokens() * 16 + session.tenant.size()) +
         (session.constraint.has_value() ? static_cast<int64_t>(session.constraint->spec.text.size() +
                                                                session.constraint->matcher.size())
                                         : 0);
}

bool SessionStore::HostHasRoom(int64_t bytes) const {
  return persister_ != nullptr || host_bytes_ + bytes <= host_budget_bytes_;
}

absl::Status SessionStore::HostFull(absl::string_view what) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "host_state_memory_mib (", options_.host_state_memory_mib, " MiB) is full with ",
      host_lru_.size(), " idle sessions, and without a state_dir there is no disk tier: ", what,
      " does not fit; delete sessions, raise --host_state_memory_mib or set --state_dir"));
}

void SessionStore::AddToHost(Session& session) {
  session.host_bytes = HostCost(session, session.hibernated.has_value());
  host_bytes_ += session.host_bytes;
  session.host_lru = host_lru_.insert(host_lru_.end(), &session);
}

void SessionStore::RemoveFromHost(Session& session) {
  host_bytes_ -= session.host_bytes;
  session.host_bytes = 0;
  host_lru_.erase(session.host_lru);
}

void SessionStore::TouchInHost(Session& session) {
  if (session.ephemeral || session.slot.has_value()) return;
  host_lru_.splice(host_lru_.end(), host_lru_, session.host_lru);
}

void SessionStore::EnforceHostBudget(const Session* keep) {
  if (persister_ == nullptr) return;
  auto it = host_lru_.begin();
  while (host_bytes_ > host_budget_bytes_ && it != host_lru_.end()) {
    Session* victim = *it++;
    if (victim == keep || victim->busy) continue;
    Unload(index_.find(Pack(victim->id))->second);
  }
}

void SessionStore::Unload(IndexEntry& entry) {
  Session& session = *entry.session;
  // Its record is with the persister already: every change was handed over when it happened.
  entry.tenant = InternTenant(session.tenant);
  entry.num_tokens = session.history.num_tokens();
  entry.create_micros = absl::ToUnixMicros(session.create_time);
  entry.last_use_micros = absl::ToUnixMicros(session.last_use_time);
  RemoveFromHost(session);
  entry.session.reset();
  ++evictions_to_disk_;
  Increment(counters_.evictions_to_disk);
}

std::unique_ptr<Session> SessionStore::FromSnapshot(SessionId id, std::string tenant,
                                                    SessionSnapshot snapshot) const {
  auto session = std::make_unique<Session>();
  session->id = std::move(id);
  session->tenant = std::move(tenant);
  session->hibernated = std::move(snapshot.state);
  session->history =
      SessionHistory(snapshot.num_tokens, std::move(snapshot.pending), snapshot.token_counts);
  session->create_time = snapshot.create_time;
  session->constraint = std::move(snapshot.constraint);
  return session;
}

absl::StatusOr<Session*> SessionStore::Load(Index::iterator it, absl::Time now) {
  const SessionId id = Unpack(it->first);
  const bool replaced = persister_->ChangedElsewhere(id);
  absl::StatusOr<SessionRecord> record = persister_->Read(id, now);
  if (!record.ok()) {
    spdlog::error(
        "session {}: its record could not be read back from state_dir (the session "
        "is dropped from the index, its file left in place): {}",
        id.value, record.status().ToString());
    RemoveEntry(it);  // not EraseEntry: the file stays for inspection
    if (absl::IsNotFound(record.status())) return NotFound(id);
    return absl::DataLossError(
        absl::StrCat("session ", id.value,
                     ": its record in state_dir could not be read: ", record.status().message()));
  }
  IndexEntry& entry = it->second;
  if (replaced) on_replaced_(id);
  // Another server may have replaced the session by one of another tenant (a delete, then an
  // import under the same id): that is not this tenant's session any more.
  if (record->tenant != tenants_[entry.tenant]) {
    spdlog::info("session {}: now another tenant's in state_dir; dropped here", id.value);
    Forget(it);
    return NotFound(id);
  }
  entry.session = FromSnapshot(id, std::move(record->tenant), std::move(record->snapshot));
  entry.session->last_use_time = record->last_use_time;
  AddToHost(*entry.session);
  ++loads_from_disk_;
  Increment(counters_.loads_from_disk);
  EnforceHostBudget(entry.session.get());
  return entry.session.get();
}

absl::StatusOr<Session*> SessionStore::Adopt(const SessionId& id, absl::string_view tenant,
                                             absl::Time now) {
  if (persister_ == nullptr) return NotFound(id);
  absl::StatusOr<SessionRecord> record = persister_->Read(id, now);
  if (!record.ok()) {
    if (!absl::IsNotFound(record.status())) {
      spdlog::warn("session {}: a file in state_dir, not usable: {}", id.value,
                   record.status().ToString());
    }
    return NotFound(id);
  }
  if (record->tenant != tenant || now - record->last_use_time >= options_.idle_timeout) {
    return NotFound(id);
  }
  if (absl::Status s = CheckCapacity(tenant); !s.ok()) return s;
  on_replaced_(id);  // what this server kept of an earlier history of the id is stale
  IndexEntry& entry = AddEntry(Pack(id), tenant).first->second;
  entry.session = FromSnapshot(id, std::move(record->tenant), std::move(record->snapshot));
  entry.session->last_use_time = record->last_use_time;
  AddToHost(*entry.session);
  ++loads_from_disk_;
  Increment(counters_.loads_from_disk);
  spdlog::info("session {}: loaded from state_dir on first use", id.value);
  EnforceHostBudget(entry.session.get());
  return entry.session.get();
}

// ---- State slots ---------------------------------------------------------------------------

bool SessionStore::SlotWaitHelps() const {
  // An ephemeral request frees its slot when it ends; a named one leaves its session idle in
  // the slot, to be hibernated, which needs room in host memory or a disk tier.
  for (const Session* session : resident_) {
    if (!session->busy) continue;
    if (session->ephemeral || HostHasRoom(HostCost(*session, /*with_state=*/true))) return true;
  }
  return false;
}

absl::StatusOr<SlotId> SessionStore::AcquireSlot(Session* for_session) {
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
    if (!HostHasRoom(HostCost(*victim, /*with_state=*/true))) {
      return HostFull("hibernating an idle session to free a state slot");
    }
    if (absl::Status status = Hibernate(*victim); !status.ok()) return status;
  }
  absl::StatusOr<SlotId> slot = backend_.AllocateSlot();
  EnforceHostBudget(for_session);
  return slot;
}

absl::Status SessionStore::Hibernate(Session& session) {
  StateBlob blob;
  if (absl::Status status = backend_.ReadSlot(*session.slot, blob); !status.ok()) return status;
  session.hibernated = std::move(blob);
  ReleaseSlot(session);
  AddToHost(session);
  ++hibernations_;
  Increment(counters_.hibernations);
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
  // Out of host memory first, so that making room there never evicts it.
  RemoveFromHost(session);
  absl::StatusOr<SlotId> slot = AcquireSlot(&session);
  absl::Status status = slot.status();
  if (status.ok() && session.hibernated.has_value()) {
    // The slot's penalty counts come back with the state, in O(distinct tokens).
    status = backend_.WriteSlot(*slot, *session.hibernated);
    if (status.ok()) status = backend_.SetSeenCounts(*slot, session.history.SeenCounts());
    if (!status.ok()) backend_.FreeSlot(*slot);
  }
  if (!status.ok()) {
    AddToHost(session);
    return status;
  }
  session.hibernated.reset();
  session.slot = *slot;
  resident_.insert(&session);
  return absl::OkStatus();
}

}  // namespace linserve
