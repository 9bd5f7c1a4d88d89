// PrefixStore: longest-prefix lookup at any token, owner scoping, LRU within the byte budget,
// miss reasons, and hash collisions that never return another prefix's state.
#include "server/prefix/prefix_store.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "prefix_test_util.h"

namespace linserve {
namespace {

PrefixStore MakeStore(int64_t budget, PrefixStore::ExtendKey extend = nullptr) {
  return PrefixStore({.memory_budget_bytes = budget, .checkpoint_interval = 0, .min_tokens = 1},
                     "model-a", extend);
}

TEST(PrefixStoreTest, FindsTheLongestStoredPrefixEndingAtAnyToken) {
  PrefixStore store = MakeStore(1 << 20);
  const std::vector<TokenId> tokens = Range(10, 50);
  for (size_t n : {3u, 17u, 31u}) store.Insert("", Head(tokens, n), StateAfter(Head(tokens, n)));

  PrefixLookup hit = store.Lookup("", tokens);
  ASSERT_NE(hit.state, nullptr);
  EXPECT_EQ(hit.length, 31);
  EXPECT_EQ(hit.state->state, StateAfter(Head(tokens, 31)).state);
  EXPECT_FALSE(hit.miss.has_value());

  // Off any grid: a request ending between checkpoints gets the one below it.
  hit = store.Lookup("", Head(tokens, 29));
  EXPECT_EQ(hit.length, 17);
  EXPECT_EQ(hit.state->position, 17);
  // A request that diverges after token 20 cannot use the checkpoint at 31.
  std::vector<TokenId> diverged = tokens;
  diverged[20] = 999;
  EXPECT_EQ(store.Lookup("", diverged).length, 17);
}

TEST(PrefixStoreTest, LeavesAtLeastOneTokenToFeed) {
  PrefixStore store = MakeStore(1 << 20);
  const std::vector<TokenId> tokens = Range(1, 8);
  store.Insert("", tokens, StateAfter(tokens));
  PrefixLookup exact = store.Lookup("", tokens);
  EXPECT_EQ(exact.state, nullptr);
  EXPECT_EQ(exact.miss, PrefixMiss::kTooShort);

  store.Insert("", Head(tokens, 7), StateAfter(Head(tokens, 7)));
  EXPECT_EQ(store.Lookup("", tokens).length, 7);
  EXPECT_EQ(store.Lookup("", {1}).miss, PrefixMiss::kTooShort);
}

TEST(PrefixStoreTest, PrefixesShorterThanMinTokensAreNeitherStoredNorUsed) {
  PrefixStore store({.memory_budget_bytes = 1 << 20, .checkpoint_interval = 0, .min_tokens = 4},
                    "model-a");
  const std::vector<TokenId> tokens = Range(1, 10);
  store.Insert("", Head(tokens, 3), StateAfter(Head(tokens, 3)));
  EXPECT_EQ(store.size(), 0);
  store.Insert("", Head(tokens, 4), StateAfter(Head(tokens, 4)));
  EXPECT_EQ(store.Lookup("", tokens).length, 4);
  EXPECT_EQ(store.Lookup("", Head(tokens, 4)).miss, PrefixMiss::kTooShort);
  EXPECT_EQ(store.Lookup("", Head(tokens, 5)).length, 4);
}

TEST(PrefixStoreTest, CheckpointsBelongToTheirOwner) {
  PrefixStore store = MakeStore(1 << 20);
  const std::vector<TokenId> tokens = Range(1, 10);
  store.Insert("tenant-a", Head(tokens, 5), StateAfter(Head(tokens, 5)));
  EXPECT_EQ(store.Lookup("tenant-a", tokens).length, 5);
  const PrefixLookup other = store.Lookup("tenant-b", tokens);
  EXPECT_EQ(other.state, nullptr);
  EXPECT_EQ(other.miss, PrefixMiss::kNoPrefix);
  EXPECT_EQ(store.Lookup("", tokens).miss, PrefixMiss::kNoPrefix);
}

TEST(PrefixStoreTest, EvictsTheLeastRecentlyUsedWithinTheBudgetAndSaysSo) {
  // Room for two checkpoints of 4000 state bytes plus tokens and bookkeeping, not three.
  PrefixStore store = MakeStore(2 * 4400);
  const std::vector<TokenId> a = Range(100, 10), b = Range(200, 10), c = Range(300, 10);
  store.Insert("", Head(a, 9), StateAfter(Head(a, 9)));
  store.Insert("", Head(b, 9), StateAfter(Head(b, 9)));
  EXPECT_EQ(store.size(), 2);
  EXPECT_EQ(store.Lookup("", a).length, 9);  // a is now the most recently used
  store.Insert("", Head(c, 9), StateAfter(Head(c, 9)));
  EXPECT_EQ(store.size(), 2);
  EXPECT_EQ(store.evictions(), 1);
  EXPECT_LE(store.bytes(), 2 * 4400);
  EXPECT_EQ(store.Lookup("", a).length, 9);
  EXPECT_EQ(store.Lookup("", c).length, 9);
  const PrefixLookup gone = store.Lookup("", b);
  EXPECT_EQ(gone.state, nullptr);
  EXPECT_EQ(gone.miss, PrefixMiss::kEvicted);
  EXPECT_EQ(store.Lookup("", Range(400, 10)).miss, PrefixMiss::kNoPrefix);

  // Touch counts as a use too.
  EXPECT_TRUE(store.Touch("", Head(a, 9)));
  EXPECT_FALSE(store.Touch("", Head(b, 9)));
  store.Insert("", Head(b, 9), StateAfter(Head(b, 9)));  // evicts c
  EXPECT_EQ(store.Lookup("", a).length, 9);
  EXPECT_EQ(store.Lookup("", c).miss, PrefixMiss::kEvicted);
  EXPECT_EQ(store.Lookup("", b).length, 9);  // back again: a hit, no longer "evicted"
}

TEST(PrefixStoreTest, ACheckpointLargerThanTheBudgetIsNotStoredAndZeroDisables) {
  PrefixStore small = MakeStore(1000);
  small.Insert("", Range(1, 4), StateAfter(Range(1, 4)));
  EXPECT_EQ(small.size(), 0);
  EXPECT_EQ(small.bytes(), 0);

  PrefixStore off = MakeStore(0);
  EXPECT_FALSE(off.enabled());
  off.Insert("", Range(1, 4), StateAfter(Range(1, 4)));
  EXPECT_EQ(off.size(), 0);
  EXPECT_EQ(off.Lookup("", Range(1, 5)).state, nullptr);
}

TEST(PrefixStoreTest, InsertKeepsTheHeldCheckpointAndChecksThePosition) {
  PrefixStore store = MakeStore(1 << 20);
  const std::vector<TokenId> tokens = Range(1, 6);
  store.Insert("", Head(tokens, 5), StateAfter(Head(tokens, 5)));
  const int64_t bytes = store.bytes();
  store.Insert("", Head(tokens, 5), StateAfter(Head(tokens, 5)));
  EXPECT_EQ(store.size(), 1);
  EXPECT_EQ(store.bytes(), bytes);
  store.Insert("", Head(tokens, 4), StateAfter(Head(tokens, 5)));  // position 5 != 4 tokens
  EXPECT_EQ(store.size(), 1);
}

// Every prefix of the same length collides under this key function.
uint64_t LengthOnly(uint64_t key, TokenId) { return key + 1; }

TEST(PrefixStoreTest, ACollidingKeyNeverReturnsAnotherPrefixsState) {
  PrefixStore store = MakeStore(1 << 20, &LengthOnly);
  const std::vector<TokenId> stored = {5, 6, 7, 8};
  store.Insert("", stored, StateAfter(stored));
  // Same length-4 key, other tokens: the verification rejects it.
  const std::vector<TokenId> other = {5, 6, 9, 8, 1};
  const PrefixLookup miss = store.Lookup("", other);
  EXPECT_EQ(miss.state, nullptr);
  EXPECT_EQ(miss.miss, PrefixMiss::kNoPrefix);
  EXPECT_FALSE(store.Touch("", {5, 6, 9, 8}));
  // A colliding insert leaves the older checkpoint in place.
  store.Insert("", {5, 6, 9, 8}, StateAfter({5, 6, 9, 8}));
  EXPECT_EQ(store.size(), 1);
  const PrefixLookup hit = store.Lookup("", {5, 6, 7, 8, 1});
  EXPECT_EQ(hit.length, 4);
  EXPECT_EQ(hit.state->state, StateAfter(stored).state);
}

// Tenant B inserting far beyond its budget evicts only its own least recently used
// checkpoints: tenant A's older ones stay and still hit.
TEST(PrefixStoreTest, ATenantOverItsBudgetEvictsItsOwnOldestFirst) {
  // Each checkpoint is 4000 state bytes plus tokens and bookkeeping (under 4400): the whole
  // budget holds six, a tenant's two.
  PrefixStore store({.memory_budget_bytes = 6 * 4400,
                     .tenant_budget_bytes = 2 * 4400,
                     .checkpoint_interval = 0,
                     .min_tokens = 1},
                    "model-a");
  const std::vector<TokenId> a1 = Range(100, 10), a2 = Range(200, 10);
  store.Insert("alice", Head(a1, 9), StateAfter(Head(a1, 9)));
  store.Insert("alice", Head(a2, 9), StateAfter(Head(a2, 9)));
  std::vector<std::vector<TokenId>> bobs;
  for (int i = 0; i < 20; ++i) {
    bobs.push_back(Range(1000 + 100 * i, 10));
    EXPECT_TRUE(store.Insert("bob", Head(bobs.back(), 9), StateAfter(Head(bobs.back(), 9))));
    EXPECT_LE(store.bytes("bob"), 2 * 4400);
  }
  EXPECT_EQ(store.evictions(), 18);
  EXPECT_EQ(store.Lookup("alice", a1).length, 9);
  EXPECT_EQ(store.Lookup("alice", a2).length, 9);
  EXPECT_EQ(store.Lookup("bob", bobs[19]).length, 9);
  EXPECT_EQ(store.Lookup("bob", bobs[18]).length, 9);
  EXPECT_EQ(store.Lookup("bob", bobs[17]).miss, PrefixMiss::kEvicted);
  // A lookup makes a checkpoint its owner's most recently used: bob's next insert evicts the
  // other one.
  EXPECT_EQ(store.Lookup("bob", bobs[18]).length, 9);
  const std::vector<TokenId> next = Range(5000, 10);
  EXPECT_TRUE(store.Insert("bob", Head(next, 9), StateAfter(Head(next, 9))));
  EXPECT_EQ(store.Lookup("bob", bobs[18]).length, 9);
  EXPECT_EQ(store.Lookup("bob", bobs[19]).miss, PrefixMiss::kEvicted);
  // A checkpoint larger than a tenant's budget is not stored.
  PrefixStore small({.memory_budget_bytes = 4400, .tenant_budget_bytes = 1000, .min_tokens = 1},
                    "model-a");
  EXPECT_FALSE(small.Insert("bob", Head(next, 9), StateAfter(Head(next, 9))));
  EXPECT_EQ(small.bytes("bob"), 0);
}

TEST(PrefixStoreTest, OptionsAreValidated) {
  EXPECT_TRUE(ValidatePrefixStoreOptions({}).ok());
  const absl::Status budget = ValidatePrefixStoreOptions({.memory_budget_bytes = -1});
  EXPECT_TRUE(absl::IsInvalidArgument(budget));
  EXPECT_NE(budget.message().find("memory budget"), std::string::npos);
  const absl::Status interval = ValidatePrefixStoreOptions({.checkpoint_interval = -5});
  EXPECT_NE(interval.message().find("checkpoint interval"), std::string::npos);
  const absl::Status min = ValidatePrefixStoreOptions({.min_tokens = 0});
  EXPECT_NE(min.message().find("min tokens"), std::string::npos);
  for (int64_t tenant : {int64_t{-1}, int64_t{1001}}) {
    const absl::Status status =
        ValidatePrefixStoreOptions({.memory_budget_bytes = 1000, .tenant_budget_bytes = tenant});
    EXPECT_TRUE(absl::IsInvalidArgument(status));
    EXPECT_NE(status.message().find("tenant budget must be in [0, the memory budget = 1000]"),
              std::string::npos)
        << status;
  }
}

}  // namespace
}  // namespace linserve
