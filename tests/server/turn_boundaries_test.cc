// TurnBoundaries: per-session and per-tenant limits on the turn boundaries kept.
#include "server/sessions/turn_boundaries.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A boundary at `num_tokens` charged 4000 state bytes plus 128 of bookkeeping.
SessionSnapshot BoundaryAt(int64_t num_tokens) {
  SessionSnapshot snapshot;
  snapshot.num_tokens = num_tokens;
  snapshot.state.position = num_tokens;
  snapshot.state.state.assign(1000, static_cast<float>(num_tokens));
  return snapshot;
}

SessionId Id(char c) { return SessionId{std::string(32, c)}; }

// Tenant B's turns beyond its budget drop its own oldest boundaries; tenant A's stay.
TEST(TurnBoundariesTest, ATenantOverItsBudgetDropsItsOwnOldestFirst) {
  TurnBoundaries boundaries(
      {.per_session = 8, .memory_budget_bytes = 8 * 4128, .tenant_budget_bytes = 3 * 4128});
  boundaries.Add("alice", Id('a'), BoundaryAt(10));
  boundaries.Add("alice", Id('a'), BoundaryAt(20));
  for (int64_t n = 1; n <= 6; ++n) boundaries.Add("bob", Id('b'), BoundaryAt(n));
  boundaries.Add("bob", Id('c'), BoundaryAt(7));
  EXPECT_THAT(boundaries.Boundaries(Id('a')), ElementsAre(0, 10, 20));
  EXPECT_THAT(boundaries.Boundaries(Id('b')), ElementsAre(0, 5, 6));
  EXPECT_THAT(boundaries.Boundaries(Id('c')), ElementsAre(0, 7));
  EXPECT_EQ(boundaries.bytes("alice"), 2 * 4128);
  EXPECT_EQ(boundaries.bytes("bob"), 3 * 4128);
  EXPECT_EQ(boundaries.bytes(), 5 * 4128);
  EXPECT_TRUE(boundaries.At(Id('a'), 10, 1000).ok());
  boundaries.Erase(Id('b'));
  boundaries.Erase(Id('c'));
  EXPECT_EQ(boundaries.bytes("bob"), 0);
  EXPECT_EQ(boundaries.bytes(), 2 * 4128);
}

// Without a tenant budget the whole budget is shared, the oldest of anyone's first.
TEST(TurnBoundariesTest, WithoutATenantBudgetTheOldestOfAnySessionGoFirst) {
  TurnBoundaries boundaries({.per_session = 8, .memory_budget_bytes = 3 * 4128});
  boundaries.Add("alice", Id('a'), BoundaryAt(10));
  for (int64_t n = 1; n <= 3; ++n) boundaries.Add("bob", Id('b'), BoundaryAt(n));
  EXPECT_THAT(boundaries.Boundaries(Id('a')), ElementsAre(0));
  EXPECT_THAT(boundaries.Boundaries(Id('b')), ElementsAre(0, 1, 2, 3));
}

TEST(TurnBoundariesTest, OptionsAreValidated) {
  EXPECT_TRUE(ValidateTurnBoundaryOptions({}).ok());
  for (int64_t tenant : {int64_t{-1}, int64_t{1001}}) {
    const absl::Status status =
        ValidateTurnBoundaryOptions({.memory_budget_bytes = 1000, .tenant_budget_bytes = tenant});
    EXPECT_TRUE(absl::IsInvalidArgument(status));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("tenant budget must be in [0, the memory budget = 1000] bytes"));
  }
}

}  // namespace
}  // namespace linserve
