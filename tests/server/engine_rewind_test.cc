// RewindSession and ForkSessionAt: a session returns exactly to a kept turn boundary (state,
// pending tokens, penalty counts) and continues as it did the first time; errors name
// num_tokens and the kept boundaries; busy sessions and other tenants' sessions are refused.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "fake_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/synchronization/notification.h"
#include "server/engine/engine.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class EngineRewindTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  std::unique_ptr<Engine> Start(EngineOptions options = {}, int32_t slots = 8,
                                FakeBackend** fake_out = nullptr) {
    auto fake = std::make_unique<FakeBackend>(model_.config, slots);
    if (fake_out != nullptr) *fake_out = fake.get();
    std::unique_ptr<Backend> backend = std::move(fake);
    backend = BackendForLoop(std::move(backend), GetParam());
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static GenerateRequest Turn(const SessionId& id, std::vector<TokenId> prompt, uint64_t seed) {
    GenerateRequest r;
    r.request_id = "turn";
    r.session_id = id;
    r.prompt = std::move(prompt);
    r.max_new_tokens = 6;
    r.sampling.seed = seed;
    r.sampling.temperature = 0.9f;
    r.sampling.repetition_penalty = 1.4f;
    r.sampling.frequency_penalty = 0.5f;
    r.ignore_eos = true;
    return r;
  }

  Model model_ = MakeRandomModel(TinyConfig(), 5);
  MetricsRegistry metrics_;
};

TEST_P(EngineRewindTest, RewindReturnsExactlyToAKeptBoundaryAndContinuesAsBefore) {
  std::unique_ptr<Engine> engine = Start();
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1, 2, 3}, 1)).status.ok());
  const int64_t after_one = GetSession(*engine, id)->num_tokens;
  const Outcome second = RunRequest(*engine, Turn(id, {4, 5}, 2));
  const Outcome third = RunRequest(*engine, Turn(id, {6}, 3));
  ASSERT_TRUE(second.status.ok() && third.status.ok());
  const int64_t after_three = GetSession(*engine, id)->num_tokens;
  EXPECT_THAT(GetSession(*engine, id)->boundaries,
              ElementsAre(0, after_one, after_one + 2 + 6, after_three));

  absl::StatusOr<SessionInfo> rewound = RewindSession(*engine, id, after_one);
  ASSERT_TRUE(rewound.ok()) << rewound.status();
  EXPECT_EQ(rewound->num_tokens, after_one);
  EXPECT_THAT(rewound->boundaries, ElementsAre(0, after_one));
  // The same turn again gives the same tokens: state, pending token and counts are as they were.
  const Outcome again = RunRequest(*engine, Turn(id, {4, 5}, 2));
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.tokens, second.tokens);

  // Back to the empty session: it continues as a new one would.
  ASSERT_TRUE(RewindSession(*engine, id, 0).ok());
  const SessionId fresh = CreateSession(*engine)->id;
  EXPECT_EQ(RunRequest(*engine, Turn(id, {9, 9}, 4)).tokens,
            RunRequest(*engine, Turn(fresh, {9, 9}, 4)).tokens);
}

TEST_P(EngineRewindTest, RewindWorksOnAHibernatedSession) {
  std::unique_ptr<Engine> engine = Start({}, /*slots=*/1);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1, 2, 3}, 1)).status.ok());
  const int64_t boundary = GetSession(*engine, id)->num_tokens;
  const Outcome second = RunRequest(*engine, Turn(id, {4, 5}, 2));
  // Another session takes the only slot: `id` hibernates.
  const SessionId other = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(other, {7}, 9)).status.ok());
  ASSERT_FALSE(GetSession(*engine, id)->resident);
  ASSERT_TRUE(RewindSession(*engine, id, boundary).ok());
  EXPECT_EQ(RunRequest(*engine, Turn(id, {4, 5}, 2)).tokens, second.tokens);
}

TEST_P(EngineRewindTest, ForkAtABoundaryBranchesWithoutChangingTheSource) {
  std::unique_ptr<Engine> engine = Start();
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1, 2, 3}, 1)).status.ok());
  const int64_t boundary = GetSession(*engine, id)->num_tokens;
  const Outcome second = RunRequest(*engine, Turn(id, {4, 5}, 2));
  const int64_t now = GetSession(*engine, id)->num_tokens;

  absl::StatusOr<SessionInfo> branch = ForkSessionAt(*engine, id, boundary);
  ASSERT_TRUE(branch.ok()) << branch.status();
  EXPECT_NE(branch->id, id);
  EXPECT_EQ(branch->num_tokens, boundary);
  EXPECT_EQ(RunRequest(*engine, Turn(branch->id, {4, 5}, 2)).tokens, second.tokens);
  EXPECT_EQ(GetSession(*engine, id)->num_tokens, now);

  // At its current length a fork is an ordinary fork.
  absl::StatusOr<SessionInfo> whole = ForkSessionAt(*engine, id, now);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(RunRequest(*engine, Turn(whole->id, {8}, 5)).tokens,
            RunRequest(*engine, Turn(id, {8}, 5)).tokens);
}

TEST_P(EngineRewindTest, ErrorsNameNumTokensAndTheKeptBoundaries) {
  EngineOptions options;
  options.turn_boundaries.per_session = 2;
  std::unique_ptr<Engine> engine = Start(options);
  const SessionId id = CreateSession(*engine)->id;
  std::vector<int64_t> lengths;
  for (int turn = 0; turn < 3; ++turn) {
    ASSERT_TRUE(RunRequest(*engine, Turn(id, {TokenId(10 + turn)}, turn)).status.ok());
    lengths.push_back(GetSession(*engine, id)->num_tokens);
  }
  // Two kept: the first turn's boundary was dropped.
  EXPECT_THAT(GetSession(*engine, id)->boundaries, ElementsAre(0, lengths[1], lengths[2]));
  absl::StatusOr<SessionInfo> dropped = RewindSession(*engine, id, lengths[0]);
  EXPECT_TRUE(absl::IsInvalidArgument(dropped.status()));
  EXPECT_THAT(dropped.status().message(), HasSubstr(absl::StrCat("num_tokens: ", lengths[0])));
  EXPECT_THAT(dropped.status().message(),
              HasSubstr(absl::StrCat("kept: 0, ", lengths[1], ", ", lengths[2])));
  EXPECT_TRUE(absl::IsInvalidArgument(RewindSession(*engine, id, -1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ForkSessionAt(*engine, id, 3).status()));

  SessionId unknown{std::string(32, 'f')};
  EXPECT_TRUE(absl::IsNotFound(RewindSession(*engine, unknown, 0).status()));
  // Another tenant's session is not found, with the message of an unknown id.
  const absl::Status foreign = RewindSession(*engine, id, 0, "mallory").status();
  EXPECT_TRUE(absl::IsNotFound(foreign));
  EXPECT_THAT(foreign.message(), Not(HasSubstr("kept")));
  EXPECT_TRUE(absl::IsNotFound(ForkSessionAt(*engine, id, 0, "mallory").status()));
  EXPECT_EQ(GetSession(*engine, id)->num_tokens, lengths[2]);
}

TEST_P(EngineRewindTest, ABusySessionIsAborted) {
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start({}, 8, &fake);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1}, 1)).status.ok());
  fake->CloseGate();
  auto sink = std::make_shared<RecordingSink>();
  GenerateRequest longer = Turn(id, {2}, 2);
  longer.max_new_tokens = 50;
  ASSERT_TRUE(engine->Submit(longer, sink).ok());
  sink->WaitForTokens(1);  // prefilled; now held in its first decode
  // Queued while the request runs (the engine thread may be held at the gate): it is run at the
  // next step, with 49 tokens still to go.
  absl::Notification answered;
  absl::Status busy;
  engine->RewindSession("", id, 0, [&](absl::StatusOr<SessionInfo> info) {
    busy = info.status();
    answered.Notify();
  });
  fake->Open();
  answered.WaitForNotification();
  EXPECT_TRUE(absl::IsAborted(busy)) << busy;
  ASSERT_TRUE(sink->Wait().status.ok());
  EXPECT_TRUE(RewindSession(*engine, id, 0).ok());
}

// Turn boundaries are read asynchronously: a session operation lands the reads still in flight
// first. The engine is kept busy by another stream (so it never lands them while idle) and the
// backend lands a read only when the engine waits for it: only the operation's landing can
// make the boundary visible.
TEST_P(EngineRewindTest, ABoundaryStillBeingReadLandsBeforeASessionOperation) {
  FakeBackend* fake = nullptr;
  EngineOptions options;
  options.requests.max_new_tokens = 1 << 30;  // the busy stream outlives the test
  std::unique_ptr<Engine> engine = Start(options, 8, &fake);
  fake->set_reads_land_when_waited(true);
  auto busy = std::make_shared<RecordingSink>();
  GenerateRequest stream;
  stream.request_id = "busy";
  stream.prompt = {7, 8};
  stream.max_new_tokens = 1 << 30;
  stream.ignore_eos = true;
  const absl::StatusOr<JobId> busy_id = engine->Submit(stream, busy);
  ASSERT_TRUE(busy_id.ok());
  busy->WaitForTokens(1);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1, 2, 3}, 1)).status.ok());
  const absl::StatusOr<SessionInfo> info = GetSession(*engine, id);
  ASSERT_TRUE(info.ok());
  EXPECT_THAT(info->boundaries, ElementsAre(0, info->num_tokens));
  absl::StatusOr<SessionInfo> rewound = RewindSession(*engine, id, info->num_tokens);
  EXPECT_TRUE(rewound.ok()) << rewound.status();
  engine->Cancel(*busy_id);
  busy->Wait();
}

TEST_P(EngineRewindTest, DeletedSessionsLeaveNoBoundariesAndOptionsAreValidated) {
  std::unique_ptr<Engine> engine = Start();
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn(id, {1, 2}, 1)).status.ok());
  // A session operation: the turn boundary's read has landed; the stats are published.
  EXPECT_THAT(GetSession(*engine, CreateSession(*engine)->id)->boundaries, ElementsAre(0));
  EXPECT_THAT(metrics_.RenderPrometheus(), Not(HasSubstr("linserve_session_checkpoint_bytes 0\n")));
  ASSERT_TRUE(DeleteSession(*engine, id).ok());
  const SessionId next = CreateSession(*engine)->id;  // publishes the stats
  EXPECT_THAT(GetSession(*engine, next)->boundaries, ElementsAre(0));
  EXPECT_THAT(metrics_.RenderPrometheus(), HasSubstr("linserve_session_checkpoint_bytes 0\n"));

  EngineOptions bad;
  bad.turn_boundaries.per_session = -1;
  absl::StatusOr<std::unique_ptr<Engine>> refused =
      Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), bad, metrics_);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_THAT(refused.status().message(), HasSubstr("per session"));
}

INSTANTIATE_TEST_SUITE_P(Loops, EngineRewindTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

}  // namespace
}  // namespace linserve
