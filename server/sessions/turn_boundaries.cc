#include "server/sessions/turn_boundaries.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace linserve {
namespace {

int64_t BytesOf(const SessionSnapshot& s) {
  return static_cast<int64_t>(s.state.state.size() * sizeof(float) +
                              s.pending.size() * sizeof(TokenId) +
                              s.token_counts.size() * sizeof(s.token_counts[0])) +
         (s.constraint.has_value()
              ? static_cast<int64_t>(s.constraint->spec.text.size() + s.constraint->matcher.size())
              : 0) +
         128;
}

}  // namespace

absl::Status ValidateTurnBoundaryOptions(const TurnBoundaryOptions& options) {
  if (options.per_session < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "turn boundaries per session must be >= 0 (0 keeps none), got ", options.per_session));
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "turn boundary memory budget must be >= 0 bytes, got ", options.memory_budget_bytes));
  }
  if (options.tenant_budget_bytes < 0 ||
      options.tenant_budget_bytes > options.memory_budget_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("turn boundary tenant budget must be in [0, the memory budget = ",
                     options.memory_budget_bytes, "] bytes (0: the memory budget alone), got ",
                     options.tenant_budget_bytes));
  }
  return absl::OkStatus();
}

TurnBoundaries::TurnBoundaries(const TurnBoundaryOptions& options) : options_(options) {}

void TurnBoundaries::Add(absl::string_view tenant, const SessionId& id, SessionSnapshot boundary) {
  if (options_.per_session == 0 || boundary.num_tokens == 0) return;
  const int64_t bytes = BytesOf(boundary);
  const int64_t tenant_budget = options_.tenant_budget_bytes > 0 ? options_.tenant_budget_bytes
                                                                 : options_.memory_budget_bytes;
  if (bytes > tenant_budget) return;
  std::vector<BoundaryList::iterator>& mine = by_session_[id];
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i]->snapshot.num_tokens == boundary.num_tokens) {
      Remove(mine[i]);  // may erase `mine` when it was the only one
      break;
    }
  }
  std::vector<BoundaryList::iterator>& kept = by_session_[id];
  all_.push_back(Boundary{.id = id,
                          .tenant = std::string(tenant),
                          .snapshot = std::move(boundary),
                          .bytes = bytes,
                          .sequence = next_sequence_++});
  kept.push_back(std::prev(all_.end()));
  TenantShare& share = tenants_[tenant];
  share.oldest_first.emplace(all_.back().sequence, std::prev(all_.end()));
  share.bytes += bytes;
  bytes_ += bytes;
  while (kept.size() > static_cast<size_t>(options_.per_session)) Remove(kept.front());
  // The tenant's share holds the new boundary, which fits its budget: it is never emptied here.
  while (share.bytes > tenant_budget) Remove(share.oldest_first.begin()->second);
  while (bytes_ > options_.memory_budget_bytes) Remove(all_.begin());
}

void TurnBoundaries::Remove(BoundaryList::iterator it) {
  auto session = by_session_.find(it->id);
  std::vector<BoundaryList::iterator>& mine = session->second;
  mine.erase(std::find(mine.begin(), mine.end(), it));
  if (mine.empty()) by_session_.erase(session);
  auto share = tenants_.find(it->tenant);
  share->second.oldest_first.erase(it->sequence);
  share->second.bytes -= it->bytes;
  if (share->second.oldest_first.empty()) tenants_.erase(share);
  bytes_ -= it->bytes;
  all_.erase(it);
}

int64_t TurnBoundaries::bytes(absl::string_view tenant) const {
  auto share = tenants_.find(tenant);
  return share == tenants_.end() ? 0 : share->second.bytes;
}

absl::StatusOr<SessionSnapshot> TurnBoundaries::At(const SessionId& id, int64_t num_tokens,
                                                   int64_t state_floats) const {
  if (num_tokens == 0) {
    SessionSnapshot empty;
    empty.state.state.assign(static_cast<size_t>(state_floats), 0.0f);
    return empty;
  }
  if (auto session = by_session_.find(id); session != by_session_.end()) {
    for (const BoundaryList::iterator& it : session->second) {
      if (it->snapshot.num_tokens == num_tokens) return it->snapshot;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("num_tokens: ", num_tokens, " is not a kept turn boundary of session ", id.value,
                   "; kept: ", absl::StrJoin(Boundaries(id), ", ")));
}

std::vector<int64_t> TurnBoundaries::Boundaries(const SessionId& id) const {
  std::vector<int64_t> out = {0};
  if (auto session = by_session_.find(id); session != by_session_.end()) {
    for (const BoundaryList::iterator& it : session->second) {
      out.push_back(it->snapshot.num_tokens);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void TurnBoundaries::DropAfter(const SessionId& id, int64_t num_tokens) {
  auto session = by_session_.find(id);
  if (session == by_session_.end()) return;
  std::vector<BoundaryList::iterator> later;
  for (const BoundaryList::iterator& it : session->second) {
    if (it->snapshot.num_tokens > num_tokens) later.push_back(it);
  }
  for (const BoundaryList::iterator& it : later) Remove(it);
}

void TurnBoundaries::Erase(const SessionId& id) {
  auto session = by_session_.find(id);
  if (session == by_session_.end()) return;
  const std::vector<BoundaryList::iterator> mine = session->second;
  for (const BoundaryList::iterator& it : mine) Remove(it);
}

}  // namespace linserve
