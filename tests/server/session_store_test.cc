#include "server/sessions/session_store.h"

#include <set>
#include <string>
#include <vector>

#include "fake_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

class SessionStoreTest : public ::testing::Test {
 protected:
  explicit SessionStoreTest(int32_t slots = 2) : backend_(TinyConfig(), slots) {}

  // Makes `s` resident and feeds it `tokens` directly through the backend.
  void Feed(Session& s, std::vector<TokenId> tokens, absl::Time now) {
    ASSERT_TRUE(store_.MakeResident(s, now).ok());
    ASSERT_TRUE(backend_.Prefill(*s.slot, tokens, {}).ok());
    s.history.Append(tokens);
  }
  StateBlob Read(const Session& s) {
    absl::StatusOr<SessionSnapshot> snapshot = store_.Snapshot(s);
    EXPECT_TRUE(snapshot.ok());
    return snapshot->state;
  }

  FakeBackend backend_;
  SessionStoreOptions options_{.max_sessions = 4, .idle_timeout = absl::Minutes(10)};
  SessionStore store_{backend_, options_};
};

TEST_F(SessionStoreTest, NewSessionsTakeNoSlotUntilUsed) {
  absl::StatusOr<Session*> s = store_.Create(kT0);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->id.value.size(), 32u);
  EXPECT_FALSE((*s)->slot.has_value());
  EXPECT_EQ(backend_.free_slots(), 2);
  EXPECT_EQ(store_.hibernated_sessions(), 1);
  ASSERT_TRUE(store_.MakeResident(**s, kT0).ok());
  EXPECT_EQ(backend_.free_slots(), 1);
  EXPECT_EQ(store_.resident_named_sessions(), 1);
  EXPECT_EQ(*backend_.SlotPosition(*(*s)->slot), 0);
}

TEST_F(SessionStoreTest, HibernatesTheLeastRecentlyUsedIdleSessionAndRestoresItExactly) {
  Session* a = *store_.Create(kT0);
  Session* b = *store_.Create(kT0);
  Session* c = *store_.Create(kT0);
  Feed(*a, {1, 2, 3}, kT0 + absl::Seconds(1));
  Feed(*b, {4, 5}, kT0 + absl::Seconds(2));
  const StateBlob a_state = Read(*a);
  b->busy = true;

  // c needs a slot: a (least recently used, idle) is hibernated, b (busy) never is.
  Feed(*c, {6}, kT0 + absl::Seconds(3));
  EXPECT_FALSE(a->slot.has_value());
  ASSERT_TRUE(a->hibernated.has_value());
  EXPECT_TRUE(b->slot.has_value());
  EXPECT_EQ(store_.hibernations(), 1);
  EXPECT_EQ(store_.hibernated_sessions(), 1);

  // a comes back: c is now the LRU idle one, and a's state is bit-identical.
  ASSERT_TRUE(store_.MakeResident(*a, kT0 + absl::Seconds(4)).ok());
  EXPECT_FALSE(c->slot.has_value());
  const StateBlob restored = Read(*a);
  EXPECT_EQ(restored.position, 3);
  EXPECT_EQ(restored.state, a_state.state);
}

TEST_F(SessionStoreTest, ResourceExhaustedWhenEverySlotIsBusy) {
  Session* a = *store_.Create(kT0);
  Session* b = *store_.Create(kT0);
  Session* c = *store_.Create(kT0);
  Feed(*a, {1}, kT0);
  Feed(*b, {1}, kT0);
  a->busy = b->busy = true;
  const absl::Status status = store_.MakeResident(*c, kT0);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("all 2 state slots"));
  EXPECT_EQ(store_.CreateEphemeral(kT0).status().code(), absl::StatusCode::kResourceExhausted);
  b->busy = false;
  EXPECT_TRUE(store_.MakeResident(*c, kT0).ok());
}

TEST_F(SessionStoreTest, EnforcesMaxSessionsButNotForEphemeralSessions) {
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store_.Create(kT0).ok());
  const absl::Status status = store_.Create(kT0).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()), HasSubstr("max_sessions (4)"));
  absl::StatusOr<Session*> ephemeral = store_.CreateEphemeral(kT0);
  ASSERT_TRUE(ephemeral.ok());
  EXPECT_TRUE((*ephemeral)->busy);
  EXPECT_EQ(store_.Find((*ephemeral)->id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_.named_sessions(), 4);
  EXPECT_EQ(store_.ephemeral_sessions(), 1);
  store_.Erase(*ephemeral);
  EXPECT_EQ(backend_.free_slots(), 2);
}

TEST_F(SessionStoreTest, ExpiresOnlyIdleSessionsPastTheTimeout) {
  Session* old_idle = *store_.Create(kT0);
  Session* old_busy = *store_.Create(kT0);
  Session* recent = *store_.Create(kT0 + absl::Minutes(5));
  Feed(*old_idle, {1}, kT0);
  old_busy->busy = true;
  const SessionId old_id = old_idle->id;
  EXPECT_TRUE(store_.ExpireIdle(kT0 + absl::Minutes(9)).empty());
  const std::vector<SessionId> expired = store_.ExpireIdle(kT0 + absl::Minutes(10));
  EXPECT_EQ(expired, std::vector<SessionId>{old_id});
  EXPECT_EQ(store_.Find(old_id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_.Find(old_busy->id).ok());
  EXPECT_TRUE(store_.Find(recent->id).ok());
  EXPECT_EQ(backend_.free_slots(), 2);  // the expired session's slot came back
}

// Each expiry call checks a bounded slice of a large index, so the engine thread never stalls
// on it; every session past the timeout still goes within kExpirySweepCalls calls.
TEST(SessionStoreExpiryTest, ALargeIndexIsSweptInSlicesAndEverySessionExpires) {
  FakeBackend backend(TinyConfig(), 2);
  SessionStore store(backend, {.max_sessions = 1 << 20, .idle_timeout = absl::Minutes(10)});
  const size_t sessions = SessionStore::kExpiryScanAll * SessionStore::kExpirySweepCalls / 20;
  for (size_t i = 0; i < sessions; ++i) ASSERT_TRUE(store.Create(kT0).ok());
  const absl::Time later = kT0 + absl::Minutes(10);
  size_t expired = 0;
  int calls = 0;
  while (expired < sessions && calls < static_cast<int>(SessionStore::kExpirySweepCalls)) {
    const size_t now_expired = store.ExpireIdle(later).size();
    EXPECT_LE(now_expired, std::max(SessionStore::kExpiryScanAll, sessions / 60));
    expired += now_expired;
    ++calls;
  }
  EXPECT_EQ(expired, sessions);
  EXPECT_EQ(store.named_sessions(), 0);
  EXPECT_EQ(calls, 3);  // 4096 + 4096 + the 4096 left
  EXPECT_TRUE(store.ExpireIdle(later).empty());
}

TEST_F(SessionStoreTest, ForkCopiesStateSlotToSlotOrToHostMemory) {
  Session* a = *store_.Create(kT0);
  Feed(*a, {7, 8, 9}, kT0);
  a->history.Append({10});  // sent, not yet fed
  a->history.SetPending({10});
  a->constraint.emplace();
  a->constraint->spec.kind = ConstraintKind::kRegex;
  a->constraint->spec.text = "[0-9]+";
  a->constraint->matcher = "position";
  absl::StatusOr<Session*> b = store_.Fork(*a, kT0);  // a slot is free: slot to slot
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE((*b)->slot.has_value());
  absl::StatusOr<Session*> c = store_.Fork(*a, kT0);  // none free: into host memory
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE((*c)->slot.has_value());
  for (Session* fork : {*b, *c}) {
    EXPECT_NE(fork->id, a->id);
    EXPECT_EQ(fork->history, a->history);
    EXPECT_EQ(fork->constraint, a->constraint);
    EXPECT_EQ(Read(*fork).state, Read(*a).state);
  }
}

TEST_F(SessionStoreTest, SnapshotAndInsertRoundTrip) {
  Session* a = *store_.Create(kT0);
  Feed(*a, {3, 3, 4}, kT0);
  a->history.Append({5});  // sent, not yet fed
  a->history.SetPending({5});
  a->constraint.emplace();
  a->constraint->spec.kind = ConstraintKind::kJsonObject;
  a->constraint->matcher = std::string("\0\1", 2);
  absl::StatusOr<SessionSnapshot> snapshot = store_.Snapshot(*a);
  ASSERT_TRUE(snapshot.ok());
  EXPECT_EQ(snapshot->constraint, a->constraint);
  EXPECT_EQ(snapshot->token_counts,
            (std::vector<std::pair<TokenId, int64_t>>{{3, 2}, {4, 1}, {5, 1}}));
  absl::StatusOr<Session*> b = store_.Insert(*snapshot, kT0);
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE((*b)->slot.has_value());
  EXPECT_EQ(Read(**b).state, Read(*a).state);
  EXPECT_EQ((*b)->history.num_tokens(), 4);
  EXPECT_EQ((*b)->constraint, a->constraint);
  EXPECT_NE((*b)->id, a->id);

  // An empty session's snapshot is the zero state.
  absl::StatusOr<SessionSnapshot> empty = store_.Snapshot(**store_.Create(kT0));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->state.position, 0);
  EXPECT_EQ(empty->state.state, std::vector<float>(TinyConfig().StateFloatsPerSlot(), 0.0f));
  EXPECT_FALSE(empty->constraint.has_value());
}

TEST_F(SessionStoreTest, ListsByIdInPages) {
  std::set<SessionId> ids;
  for (int i = 0; i < 4; ++i) ids.insert((*store_.Create(kT0))->id);
  ASSERT_TRUE(store_.CreateEphemeral(kT0).ok());  // never listed
  std::vector<SessionId> listed;
  std::optional<SessionId> after;
  while (true) {
    const std::vector<SessionInfo> page = store_.List(after, 3);
    for (const SessionInfo& s : page) listed.push_back(s.id);
    if (page.empty() || !store_.HasAfter(page.back().id)) break;
    after = page.back().id;
  }
  EXPECT_EQ(listed, std::vector<SessionId>(ids.begin(), ids.end()));
}

// Tenant B at its tenant_max_sessions is refused (naming the quota) for every way of adding a
// session, while tenant A still gets its own; a deleted session of B's makes room for B.
TEST(SessionStoreTenantTest, ATenantAtItsQuotaIsRefusedAndTheOthersAreNot) {
  FakeBackend backend(TinyConfig(), 2);
  SessionStore store(
      backend, {.max_sessions = 5, .tenant_max_sessions = 2, .idle_timeout = absl::Minutes(10)});
  Session* b0 = *store.Create(kT0, "bob");
  ASSERT_TRUE(store.Create(kT0, "bob").ok());
  const SessionSnapshot snapshot = *store.Snapshot(*b0);
  for (const absl::Status& status :
       {store.Create(kT0, "bob").status(), store.Fork(*b0, kT0).status(),
        store.Insert(snapshot, kT0, "bob").status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(status.message()), HasSubstr("tenant_max_sessions (2)"));
  }
  EXPECT_EQ(store.tenant_quota_rejections(), 3);
  EXPECT_EQ(store.named_sessions("bob"), 2);
  Session* a0 = *store.Create(kT0, "alice");
  ASSERT_TRUE(store.Fork(*a0, kT0).ok());
  EXPECT_EQ(store.named_sessions("alice"), 2);
  EXPECT_EQ(store.Create(kT0, "alice").status().code(), absl::StatusCode::kResourceExhausted);
  // The global limit still holds: a third tenant gets the one session left.
  ASSERT_TRUE(store.Create(kT0, "carol").ok());
  const absl::Status full = store.Create(kT0, "dave").status();
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_sessions (5)"));
  store.Erase(b0);
  EXPECT_EQ(store.named_sessions("bob"), 1);
  EXPECT_TRUE(store.Insert(snapshot, kT0, "bob").ok());
}

// Listing reads only the caller's own ids, paged as the whole index would be.
TEST(SessionStoreTenantTest, ListsOnlyTheOwnersSessionsInPages) {
  FakeBackend backend(TinyConfig(), 2);
  SessionStore store(backend, {.max_sessions = 100, .idle_timeout = absl::Minutes(10)});
  std::set<SessionId> alice;
  for (int i = 0; i < 30; ++i) {
    Session* s = *store.Create(kT0, i % 3 == 0 ? "alice" : "bob");
    if (s->tenant == "alice") alice.insert(s->id);
  }
  std::vector<SessionId> listed;
  std::optional<SessionId> after;
  while (true) {
    const std::vector<SessionInfo> page = store.List(after, 4, "alice");
    for (const SessionInfo& s : page) listed.push_back(s.id);
    if (page.empty() || !store.HasAfter(page.back().id, "alice")) break;
    after = page.back().id;
  }
  EXPECT_EQ(listed, std::vector<SessionId>(alice.begin(), alice.end()));
  EXPECT_TRUE(store.List(std::nullopt, 10, "carol").empty());
  for (const SessionId& id : alice) store.Erase(*store.Find(id, "alice"));
  EXPECT_TRUE(store.List(std::nullopt, 10, "alice").empty());
  EXPECT_EQ(store.named_sessions("alice"), 0);
  EXPECT_EQ(store.named_sessions("bob"), 20);
}

TEST(SessionStoreOptionsTest, Validates) {
  EXPECT_TRUE(ValidateSessionStoreOptions({}).ok());
  SessionStoreOptions no_sessions;
  no_sessions.max_sessions = 0;
  EXPECT_THAT(std::string(ValidateSessionStoreOptions(no_sessions).message()),
              HasSubstr("max_sessions"));
  for (int32_t quota : {-1, 4097}) {
    SessionStoreOptions tenant;
    tenant.tenant_max_sessions = quota;
    const absl::Status status = ValidateSessionStoreOptions(tenant);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                HasSubstr(absl::StrCat("tenant_max_sessions must be in [0, max_sessions = 4096]",
                                       " (0: max_sessions alone), got ", quota)));
  }
  SessionStoreOptions no_timeout;
  no_timeout.idle_timeout = absl::ZeroDuration();
  EXPECT_THAT(std::string(ValidateSessionStoreOptions(no_timeout).message()),
              HasSubstr("idle timeout"));
  for (int64_t mib : {int64_t{-1}, kMaxHostStateMemoryMib + 1}) {
    SessionStoreOptions budget;
    budget.host_state_memory_mib = mib;
    const absl::Status status = ValidateSessionStoreOptions(budget);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(status.message()),
        HasSubstr(absl::StrCat("host_state_memory_mib must be in [0, 16777216], got ", mib)));
  }
  SessionStoreOptions no_host_memory;
  no_host_memory.host_state_memory_mib = 0;
  EXPECT_TRUE(ValidateSessionStoreOptions(no_host_memory).ok());
}

// A snapshot is the state and a history that agree: a history that says otherwise (a bug in
// whoever changed it) is refused, never exported or persisted.
TEST_F(SessionStoreTest, SnapshotRefusesAHistoryThatDisagreesWithTheState) {
  Session* a = *store_.Create(kT0);
  Feed(*a, {3, 4}, kT0);
  a->history.Append({5});  // counted but neither fed nor pending
  const absl::Status status = store_.Snapshot(*a).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("state is at position 2"));
}

// Without a state_dir the host tier is the last one: its budget is a hard limit, and what
// does not fit is refused with the flag named, never dropped.
TEST(SessionStoreHostBudgetTest, WithoutADiskTierRefusesWhatDoesNotFitNamingTheFlag) {
  const ModelConfig config = TinyConfig();
  FakeBackend backend(config, 1);
  const int64_t budget = int64_t{1} << 20;
  // What a hibernated session of one token costs in host memory.
  const int64_t per_session = kSessionHostOverheadBytes +
                              static_cast<int64_t>(config.StateFloatsPerSlot() * sizeof(float)) +
                              16;
  SessionStore store(backend, {.max_sessions = 100000, .host_state_memory_mib = 1});
  // Fill host memory: each new session takes the slot and hibernates the previous one.
  int32_t created = 0;
  while (store.host_bytes() + per_session <= budget) {
    absl::StatusOr<Session*> s = store.Create(kT0);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(store.MakeResident(**s, kT0 + absl::Seconds(++created)).ok());
    ASSERT_TRUE(backend.Prefill(*(*s)->slot, {1}, {}).ok());
    (*s)->history.Append({1});
  }
  EXPECT_EQ(store.hibernations(), created - 1);

  // The slot's idle session cannot be hibernated: a request that needs the slot is refused,
  // and waiting would not help.
  const absl::Status hibernation = store.CreateEphemeral(kT0).status();
  EXPECT_EQ(hibernation.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(hibernation.message()),
              HasSubstr("host_state_memory_mib (1 MiB) is full"));
  EXPECT_FALSE(store.SlotWaitHelps());

  // New sessions are refused once not even an empty one fits.
  absl::Status creation;
  for (int i = 0; i < 100 && creation.ok(); ++i) creation = store.Create(kT0).status();
  EXPECT_EQ(creation.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(creation.message()), HasSubstr("--host_state_memory_mib"));
  EXPECT_LE(store.host_bytes(), budget);
  EXPECT_EQ(store.disk_sessions(), 0);  // nothing was dropped
  EXPECT_GE(store.named_sessions(), created);
}

}  // namespace
}  // namespace linserve
