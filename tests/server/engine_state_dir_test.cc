// The engine on a state directory that replicas share or that fails: a session one replica
// keeps using is never expired by another; two replicas never run requests on one session at
// once; a reload drops what belonged to another history or owner; a change that cannot be
// written fails the request or operation that made it, readiness drops until writes succeed
// again, and nothing acknowledged is lost.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "engine_test_util.h"
#include "fake_backend.h"
#include "faulty_file_system.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Every engine loop (kEngineLoops), as engine_test.
class EngineStateDirTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  // `fake`, when given, is set to the engine's backend (for its gate).
  std::unique_ptr<Engine> Start(const EngineOptions& options, FakeBackend** fake = nullptr) {
    auto owned = std::make_unique<FakeBackend>(model_.config, 8);
    if (fake != nullptr) *fake = owned.get();
    std::unique_ptr<Backend> backend = std::move(owned);
    backend = BackendForLoop(std::move(backend), GetParam());
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static GenerateRequest Turn(std::vector<TokenId> prompt, int32_t max_new_tokens,
                              uint64_t seed, const SessionId& session) {
    GenerateRequest r;
    r.request_id = "test";
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    r.sampling.seed = seed;
    r.sampling.temperature = 0.9f;
    r.ignore_eos = true;
    r.session_id = session;
    return r;
  }

  Model model_ = MakeRandomModel(TinyConfig(), 1);
  MetricsRegistry metrics_;
};

INSTANTIATE_TEST_SUITE_P(Loops, EngineStateDirTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

// Replica B indexed the session at its start and never served it; A keeps using it. B's expiry
// must look at the file (A's last use), not at its own stale index entry.
TEST_P(EngineStateDirTest, AReplicaNeverExpiresASessionAnotherReplicaKeepsUsing) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  options.sessions.idle_timeout = absl::Milliseconds(1500);
  std::unique_ptr<Engine> a = Start(options);
  const SessionId id = CreateSession(*a)->id;
  std::unique_ptr<Engine> b = Start(options);  // restores the session into its index
  // Four idle timeouts, with expiry checks on B every second, while A uses the session often.
  const absl::Time end = absl::Now() + 4 * options.sessions.idle_timeout;
  int turns = 0;
  while (absl::Now() < end) {
    const Outcome out = RunRequest(*a, Turn({3, 4}, 2, 7, id));
    ASSERT_TRUE(out.status.ok()) << "turn " << turns << ": " << out.status;
    ++turns;
    absl::SleepFor(absl::Milliseconds(250));
  }
  EXPECT_TRUE(std::filesystem::exists(options.state_dir + "/" + id.value + ".session"));
  absl::StatusOr<SessionInfo> on_b = GetSession(*b, id);
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_EQ(on_b->num_tokens, turns * 4);  // every turn: 2 prompt tokens, 2 generated
  // Once nobody uses it, it does expire (on either).
  absl::SleepFor(options.sessions.idle_timeout + absl::Milliseconds(2500));
  EXPECT_EQ(GetSession(*a, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(options.state_dir + "/" + id.value + ".session"));
}

TEST_P(EngineStateDirTest, TwoReplicasNeverRunRequestsOnOneSessionAtOnce) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  FakeBackend* fake_a = nullptr;
  std::unique_ptr<Engine> a = Start(options, &fake_a);
  std::unique_ptr<Engine> b = Start(options);
  const SessionId id = CreateSession(*a)->id;
  // A's request is held in the middle of its decode (A's backend gate) while B tries.
  auto long_turn = std::make_shared<RecordingSink>();
  fake_a->CloseGate();
  absl::StatusOr<JobId> job = a->Submit(Turn({5}, 100, 1, id), long_turn);
  ASSERT_TRUE(job.ok()) << job.status();
  while (!fake_a->WaitingAtGate()) absl::SleepFor(absl::Milliseconds(1));
  // While A's request runs, B can neither run one nor change the session in any way.
  const Outcome refused = RunRequest(*b, Turn({6}, 3, 2, id));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kUnavailable) << refused.status;
  EXPECT_THAT(std::string(refused.status.message()), HasSubstr("in use by another server"));
  EXPECT_EQ(DeleteSession(*b, id).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ForkSession(*b, id).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ExportSession(*b, id).status().code(), absl::StatusCode::kUnavailable);
  a->Cancel(*job);
  fake_a->Open();
  const Outcome cancelled = long_turn->Wait();
  const int64_t kept = GetSession(*a, id)->num_tokens;
  ASSERT_GT(kept, 1);
  // Once A's change is written, B takes the session over where A left it.
  const Outcome continued = RunRequest(*b, Turn({6}, 3, 2, id));
  ASSERT_TRUE(continued.status.ok()) << continued.status;
  EXPECT_EQ(GetSession(*b, id)->num_tokens, kept + 1 + 3);
  EXPECT_EQ(GetSession(*a, id)->num_tokens, kept + 1 + 3);
}

// A reload of a session another replica changed forgets the turn boundaries of the copy it
// replaces: they may belong to another history.
TEST_P(EngineStateDirTest, AReloadDropsTurnBoundariesOfAnotherHistory) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  std::unique_ptr<Engine> a = Start(options);
  std::unique_ptr<Engine> b = Start(options);
  const SessionId id = CreateSession(*a, "tenant")->id;
  for (uint64_t seed : {1, 2}) {
    GenerateRequest turn = Turn({1, 2, 3}, 3, seed, id);
    turn.tenant = "tenant";
    ASSERT_TRUE(RunRequest(*a, turn).status.ok());
  }
  EXPECT_EQ(GetSession(*a, id, "tenant")->boundaries, (std::vector<int64_t>{0, 6, 12}));
  // B rewinds to the start and goes another way, to the same length.
  ASSERT_TRUE(RewindSession(*b, id, 0, "tenant").ok());
  GenerateRequest other = Turn({9, 9, 9, 9, 9, 9}, 6, 3, id);
  other.tenant = "tenant";
  ASSERT_TRUE(RunRequest(*b, other).status.ok());
  absl::StatusOr<SessionInfo> reloaded = GetSession(*a, id, "tenant");
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->num_tokens, 12);
  EXPECT_EQ(reloaded->boundaries, (std::vector<int64_t>{0}));
  // A's boundary at 6 was a state of the other history: it is not offered any more.
  EXPECT_EQ(ForkSessionAt(*a, id, 6, "tenant").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A reload re-checks the owner: a session replaced under the same id by another tenant's (a
// delete, then an import with that id) is not the first tenant's any more.
TEST_P(EngineStateDirTest, AReloadRechecksTheOwner) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  std::unique_ptr<Engine> a = Start(options);
  std::unique_ptr<Engine> b = Start(options);
  const SessionId id = CreateSession(*a, "alice")->id;
  ASSERT_TRUE(GetSession(*a, id, "alice").ok());  // A holds a loaded copy of alice's session
  const std::string snapshot = *ExportSession(*a, id, "alice");
  ASSERT_TRUE(DeleteSession(*b, id, "alice").ok());
  ASSERT_TRUE(ImportSession(*b, snapshot, "mallory", id).ok());
  EXPECT_EQ(GetSession(*a, id, "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(GetSession(*a, id, "mallory").ok());
}

// A disk that fails: the request whose change it was fails naming state_dir and the OS error,
// readiness drops, a metric counts it; what was acknowledged before is on disk, and once the
// disk works again the change is written and readiness returns.
TEST_P(EngineStateDirTest, AChangeThatCannotBeWrittenFailsTheRequestThatMadeIt) {
  ScopedTempDir dir;
  FaultyFileSystem fs;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  options.file_system = &fs;
  std::unique_ptr<Engine> engine = Start(options);
  const SessionId id = CreateSession(*engine)->id;
  ASSERT_TRUE(RunRequest(*engine, Turn({1, 2}, 3, 1, id)).status.ok());
  EXPECT_TRUE(engine->writes_healthy());
  const int64_t acknowledged = GetSession(*engine, id)->num_tokens;
  ASSERT_EQ(acknowledged, 2 + 3);

  fs.FailFrom(fs.mutating_calls(), absl::ResourceExhaustedError("No space left on device"));
  const Outcome failed = RunRequest(*engine, Turn({4}, 3, 2, id));
  EXPECT_THAT(failed.status.code(), AnyOf(absl::StatusCode::kResourceExhausted,
                                          absl::StatusCode::kUnavailable));
  EXPECT_THAT(std::string(failed.status.message()), HasSubstr(options.state_dir));
  EXPECT_THAT(std::string(failed.status.message()), HasSubstr("No space left on device"));
  EXPECT_EQ(failed.tokens.size(), 3u);  // the tokens streamed; only the end says it failed
  EXPECT_FALSE(engine->writes_healthy());
  const absl::StatusOr<SessionInfo> create = CreateSession(*engine);
  EXPECT_EQ(create.status().code(), absl::StatusCode::kResourceExhausted) << create.status();
  EXPECT_THAT(metrics_.RenderPrometheus(),
              Not(HasSubstr("linserve_state_write_errors_total 0\n")));
  {
    // What a crash now leaves: the acknowledged turn, not the failed one.
    std::filesystem::copy(options.state_dir, dir.Join("crashed"));
    EngineOptions crashed = options;
    crashed.state_dir = dir.Join("crashed");
    crashed.file_system = nullptr;
    std::unique_ptr<Engine> after = Start(crashed);
    EXPECT_EQ(GetSession(*after, id)->num_tokens, acknowledged);
  }

  fs.Heal();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!engine->writes_healthy() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(engine->writes_healthy());
  const Outcome next = RunRequest(*engine, Turn({6}, 3, 3, id));
  ASSERT_TRUE(next.status.ok()) << next.status;
  // The failed turn stayed in this server's memory and was written once the disk healed.
  EXPECT_EQ(GetSession(*engine, id)->num_tokens, acknowledged + (1 + 3) + (1 + 3));
}

}  // namespace
}  // namespace linserve
