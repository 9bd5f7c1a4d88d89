// The engine end to end over a FakeBackend: generation, stops, sessions, hibernation, fork,
// export/import, persistence, cancellation, queue limits, drain and failures.
#include "server/engine/engine.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "fake_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr TokenId kBos = 256;
constexpr TokenId kEos = 257;

ModelConfig TestConfig() {
  ModelConfig config = TinyConfig();
  config.bos_token_id = kBos;
  return config;
}

// The engine plus a handle on its backend for fault injection.
struct Harness {
  std::unique_ptr<Engine> engine;
  FakeBackend* backend = nullptr;
};

// Every test runs under each engine loop (kEngineLoops): over the synchronous FakeBackend, and
// over it made asynchronous (PipelinedBackend) with one step in flight and with two.
class EngineTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  Harness Start(EngineOptions options = {}, int32_t slots = 8, int64_t eos_after = -1,
                const Model* model = nullptr) {
    const Model& m = model != nullptr ? *model : model_;
    auto fake = std::make_unique<FakeBackend>(m.config, slots, eos_after);
    Harness h;
    h.backend = fake.get();
    std::unique_ptr<Backend> backend = std::move(fake);
    backend = BackendForLoop(std::move(backend), GetParam());
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(m, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    h.engine = *std::move(engine);
    return h;
  }

  static GenerateRequest Request(std::vector<TokenId> prompt, int32_t max_new_tokens,
                                 uint64_t seed, std::optional<SessionId> session = std::nullopt) {
    GenerateRequest r;
    r.request_id = "test";
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    r.sampling.seed = seed;
    r.sampling.temperature = 0.9f;
    r.ignore_eos = true;
    r.session_id = std::move(session);
    return r;
  }

  static std::vector<TokenId> Concat(std::initializer_list<std::vector<TokenId>> parts) {
    std::vector<TokenId> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  }

  Model model_ = MakeRandomModel(TestConfig(), 1);
  MetricsRegistry metrics_;
};

TEST_P(EngineTest, StreamsTokensUntilMaxNewTokens) {
  Harness h = Start();
  GenerateRequest r = Request({72, 105, 33}, 24, 7);
  r.ignore_eos = true;
  const Outcome out = RunRequest(*h.engine, r);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens.size(), 24u);
  EXPECT_EQ(out.result.reason, FinishReason::kLength);
  EXPECT_EQ(out.result.usage.prompt_tokens, 4);  // BOS + prompt
  EXPECT_EQ(out.result.usage.generated_tokens, 24);
  EXPECT_EQ(out.result.usage.seed, 7u);
  EXPECT_EQ(out.result.usage.session_tokens, 28);
  EXPECT_GT(out.result.usage.time_to_first_token, absl::ZeroDuration());
  EXPECT_GE(out.result.usage.total_time, out.result.usage.time_to_first_token);
  for (const std::string& piece : out.pieces) EXPECT_TRUE(IsValidUtf8(piece));
  EXPECT_TRUE(IsValidUtf8(out.text));

  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.active_requests, 0);
  EXPECT_EQ(stats.free_slots, 8);
  EXPECT_EQ(stats.queue_depth, 0);
}

TEST_P(EngineTest, SameSeedSameTokensAloneAndAmongConcurrentRequests) {
  Harness h = Start({}, /*slots=*/64);
  const GenerateRequest probe = Request({10, 20, 30, 40}, 40, 1234);
  const Outcome alone = RunRequest(*h.engine, probe);
  ASSERT_TRUE(alone.status.ok());

  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 40; ++i) {
    auto sink = std::make_shared<RecordingSink>();
    GenerateRequest r = i == 17 ? probe : Request({static_cast<TokenId>(i), 5}, 10 + i, i);
    ASSERT_TRUE(h.engine->Submit(r, sink).ok());
    sinks.push_back(sink);
  }
  for (auto& sink : sinks) ASSERT_TRUE(sink->Wait().status.ok());
  EXPECT_EQ(sinks[17]->Wait().tokens, alone.tokens);
}

TEST_P(EngineTest, SessionContinuedOverTwoRequestsEqualsOneLongRequest) {
  Harness h = Start();
  absl::StatusOr<SessionInfo> session = CreateSession(*h.engine);
  ASSERT_TRUE(session.ok());
  const std::vector<TokenId> p1 = {65, 66, 67}, p2 = {68, 69};
  GenerateRequest first = Request(p1, 12, 1, session->id);
  first.sampling.repetition_penalty = 1.3f;
  first.sampling.presence_penalty = 0.5f;
  GenerateRequest second = Request(p2, 15, 2, session->id);
  second.sampling.repetition_penalty = 1.3f;
  second.sampling.frequency_penalty = 0.4f;
  const Outcome g1 = RunRequest(*h.engine, first);
  const Outcome g2 = RunRequest(*h.engine, second);
  ASSERT_TRUE(g1.status.ok() && g2.status.ok());
  EXPECT_EQ(g2.result.usage.prompt_tokens, 2);  // no second BOS
  EXPECT_EQ(g2.result.usage.session_tokens, 1 + 3 + 12 + 2 + 15);

  GenerateRequest once = second;
  once.session_id.reset();
  once.prompt = Concat({p1, g1.tokens, p2});
  const Outcome whole = RunRequest(*h.engine, once);
  ASSERT_TRUE(whole.status.ok());
  EXPECT_EQ(whole.tokens, g2.tokens);

  absl::StatusOr<SessionInfo> info = GetSession(*h.engine, session->id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_tokens, 33);
}

TEST_P(EngineTest, StopsAtEosUnlessIgnored) {
  // The fake model puts all mass on EOS from position 10: BOS + 3 prompt tokens = 4 fed, so
  // the 7th sampled token (sampled at position 10) is EOS.
  Harness h = Start({}, 8, /*eos_after=*/10);
  GenerateRequest r = Request({1, 2, 3}, 50, 3);
  r.ignore_eos = false;
  const Outcome out = RunRequest(*h.engine, r);
  ASSERT_TRUE(out.status.ok());
  EXPECT_EQ(out.result.reason, FinishReason::kEos);
  ASSERT_EQ(out.tokens.size(), 7u);
  EXPECT_EQ(out.tokens.back(), kEos);
  EXPECT_EQ(std::count(out.tokens.begin(), out.tokens.end(), kEos), 1);

  r.ignore_eos = true;
  const Outcome ignored = RunRequest(*h.engine, r);
  EXPECT_EQ(ignored.result.reason, FinishReason::kLength);
  EXPECT_EQ(ignored.tokens.size(), 50u);
}

TEST_P(EngineTest, StopsAtAStopTokenId) {
  Harness h = Start();
  GenerateRequest r = Request({9, 8, 7}, 40, 5);
  const Outcome free_run = RunRequest(*h.engine, r);
  ASSERT_EQ(free_run.tokens.size(), 40u);
  // The first position (> 0) whose token did not occur before.
  size_t k = 1;
  while (std::find(free_run.tokens.begin(), free_run.tokens.begin() + k, free_run.tokens[k]) !=
         free_run.tokens.begin() + k) {
    ++k;
  }
  r.stop_token_ids = {free_run.tokens[k]};
  const Outcome stopped = RunRequest(*h.engine, r);
  EXPECT_EQ(stopped.result.reason, FinishReason::kStop);
  EXPECT_THAT(stopped.tokens, ElementsAreArray(free_run.tokens.begin(),
                                               free_run.tokens.begin() + k + 1));
}

TEST_P(EngineTest, StopStringsEndTheTextBeforeTheirFirstOccurrence) {
  Harness h = Start();
  GenerateRequest r = Request({'a', 'b'}, 60, 11);
  r.sampling.temperature = 0;
  const Outcome free_run = RunRequest(*h.engine, r);
  // A non-empty piece from the middle of the stream as the stop string.
  size_t k = free_run.pieces.size() / 2;
  while (k < free_run.pieces.size() && free_run.pieces[k].empty()) ++k;
  ASSERT_LT(k, free_run.pieces.size());
  const std::string stop = free_run.pieces[k];
  r.stop = {stop};
  const Outcome stopped = RunRequest(*h.engine, r);
  EXPECT_EQ(stopped.result.reason, FinishReason::kStop);
  EXPECT_EQ(stopped.text, free_run.text.substr(0, free_run.text.find(stop)));
  EXPECT_LE(stopped.tokens.size(), k + 1);
  EXPECT_EQ(stopped.text.find(stop), std::string::npos);
}

TEST_P(EngineTest, TopLogprobsDescribeTheSampledToken) {
  Harness h = Start();
  GenerateRequest r = Request({1, 2}, 6, 0);
  r.sampling.temperature = 0;
  r.top_logprobs = 5;
  const Outcome out = RunRequest(*h.engine, r);
  ASSERT_EQ(out.details.size(), 6u);
  for (const GeneratedToken& t : out.details) {
    ASSERT_EQ(t.top_logprobs.size(), 5u);
    EXPECT_EQ(t.top_logprobs[0].token, t.id);  // greedy picks the most likely
    EXPECT_NEAR(t.top_logprobs[0].logprob, t.logprob, 1e-5);
    EXPECT_LE(t.logprob, 0);
    for (size_t i = 1; i < 5; ++i) {
      EXPECT_LE(t.top_logprobs[i].logprob, t.top_logprobs[i - 1].logprob);
    }
  }
  r.top_logprobs = 0;
  EXPECT_TRUE(RunRequest(*h.engine, r).details[0].top_logprobs.empty());
}

TEST_P(EngineTest, RejectsInvalidRequestsAtSubmit) {
  Harness h = Start();
  GenerateRequest r = Request({1}, -1, 0);
  const absl::StatusOr<JobId> job = h.engine->Submit(r, std::make_shared<RecordingSink>());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("max_new_tokens"));
}

TEST_P(EngineTest, UnknownSessionIsNotFound) {
  Harness h = Start();
  const Outcome out =
      RunRequest(*h.engine, Request({1}, 3, 0, SessionId{std::string(32, 'a')}));
  EXPECT_EQ(out.status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(out.status.message()), HasSubstr(std::string(32, 'a')));
  EXPECT_EQ(GetSession(*h.engine, SessionId{std::string(32, 'b')}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(h.engine->stats().queued_requests, 0);
}

TEST_P(EngineTest, ASecondConcurrentRequestOnASessionIsAborted) {
  Harness h = Start();
  const SessionId id = CreateSession(*h.engine)->id;
  h.backend->CloseGate();
  auto first = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request({1, 2}, 50, 0, id), first).ok());
  first->WaitForTokens(1);  // prefilled; now held in its first decode
  auto second = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request({3}, 5, 0, id), second).ok());
  h.backend->Open();
  const Outcome aborted = second->Wait();
  EXPECT_EQ(aborted.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(aborted.status.message()), HasSubstr("one request at a time"));
  EXPECT_TRUE(first->Wait().status.ok());
  // Busy sessions cannot be forked, exported or deleted either; once idle they can.
  EXPECT_TRUE(ForkSession(*h.engine, id).ok());
}

TEST_P(EngineTest, FullQueueIsResourceExhaustedAtOnce) {
  EngineOptions options;
  options.max_queue_depth = 4;
  Harness h = Start(options);
  h.backend->CloseGate();
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request({1}, 3, 0), running).ok());
  running->WaitForTokens(1);
  // The engine thread is now held in Decode, having admitted what its step admits: what follows
  // queues (queued in between, a request could be admitted and leave the queue's count).
  while (!h.backend->WaitingAtGate()) absl::SleepFor(absl::Milliseconds(1));
  std::vector<std::shared_ptr<RecordingSink>> queued;
  for (int i = 0; i < 4; ++i) {
    queued.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(h.engine->Submit(Request({2}, 3, 0), queued.back()).ok());
  }
  const absl::StatusOr<JobId> rejected =
      h.engine->Submit(Request({2}, 3, 0), std::make_shared<RecordingSink>());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("max_queue_depth (4)"));
  EXPECT_EQ(CreateSession(*h.engine).status().code(), absl::StatusCode::kResourceExhausted);
  h.backend->Open();
  EXPECT_TRUE(running->Wait().status.ok());
  for (auto& sink : queued) EXPECT_TRUE(sink->Wait().status.ok());
  EXPECT_TRUE(CreateSession(*h.engine).ok());
}

TEST_P(EngineTest, CancelledRequestLeavesTheSessionHoldingWhatWasSent) {
  Harness h = Start();
  const SessionId id = CreateSession(*h.engine)->id;
  const std::vector<TokenId> p1 = {5, 6, 7}, p2 = {8};
  h.backend->CloseGate();
  auto sink = std::make_shared<RecordingSink>();
  absl::StatusOr<JobId> job = h.engine->Submit(Request(p1, 1000, 4, id), sink);
  ASSERT_TRUE(job.ok());
  sink->WaitForTokens(1);
  h.engine->Cancel(*job);
  h.backend->Open();
  const Outcome cancelled = sink->Wait();
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  ASSERT_GE(cancelled.tokens.size(), 1u);
  ASSERT_LT(cancelled.tokens.size(), 1000u);
  EXPECT_EQ(GetSession(*h.engine, id)->num_tokens, 1 + 3 + cancelled.tokens.size());
  EXPECT_EQ(h.engine->stats().active_requests, 0);
  EXPECT_EQ(h.engine->stats().free_slots, 7);  // the session keeps its slot until needed

  // Continuing equals one request over everything the client was sent.
  const Outcome next = RunRequest(*h.engine, Request(p2, 10, 9, id));
  const Outcome whole = RunRequest(*h.engine, Request(Concat({p1, cancelled.tokens, p2}), 10, 9));
  ASSERT_TRUE(next.status.ok() && whole.status.ok());
  EXPECT_EQ(next.tokens, whole.tokens);
}

TEST_P(EngineTest, CancelWhileWaitingForASlot) {
  Harness h = Start({}, /*slots=*/1);
  h.backend->CloseGate();
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request({1}, 5, 0), running).ok());
  running->WaitForTokens(1);
  auto waiting = std::make_shared<RecordingSink>();
  absl::StatusOr<JobId> job = h.engine->Submit(Request({2}, 5, 0), waiting);
  ASSERT_TRUE(job.ok());
  h.engine->Cancel(*job);
  h.backend->Open();
  const Outcome cancelled = waiting->Wait();
  EXPECT_EQ(cancelled.status.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(cancelled.tokens.empty());
  EXPECT_TRUE(running->Wait().status.ok());
  EXPECT_EQ(h.engine->stats().queued_requests, 0);
}

// Sessions taking turns over fewer slots than sessions are hibernated and restored; what they
// generate must not change.
TEST_P(EngineTest, HibernationRoundTripGivesIdenticalContinuations) {
  auto run = [&](int32_t slots) {
    Harness h = Start({}, slots);
    std::vector<SessionId> ids;
    for (int i = 0; i < 5; ++i) ids.push_back(CreateSession(*h.engine)->id);
    std::vector<std::vector<TokenId>> out(5);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 5; ++i) {
        const Outcome o = RunRequest(
            *h.engine, Request({static_cast<TokenId>(40 + i), static_cast<TokenId>(round)}, 6,
                               100 * round + i, ids[i]));
        EXPECT_TRUE(o.status.ok()) << o.status;
        out[i].insert(out[i].end(), o.tokens.begin(), o.tokens.end());
      }
    }
    return std::make_pair(out, h.engine->stats().hibernated_sessions);
  };
  const auto [with_hibernation, hibernated] = run(2);
  const auto [without, none_hibernated] = run(16);
  EXPECT_EQ(hibernated, 3);
  EXPECT_EQ(none_hibernated, 0);
  EXPECT_EQ(with_hibernation, without);
  EXPECT_THAT(metrics_.RenderPrometheus(),
              Not(HasSubstr("linserve_session_hibernations_total 0\n")));
}

TEST_P(EngineTest, ForkedSessionsContinueIdentically) {
  Harness h = Start();
  const SessionId a = CreateSession(*h.engine)->id;
  ASSERT_TRUE(RunRequest(*h.engine, Request({1, 2, 3}, 9, 1, a)).status.ok());
  absl::StatusOr<SessionInfo> b = ForkSession(*h.engine, a);
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->id, a);
  EXPECT_EQ(b->num_tokens, GetSession(*h.engine, a)->num_tokens);
  const Outcome from_a = RunRequest(*h.engine, Request({4}, 20, 77, a));
  const Outcome from_b = RunRequest(*h.engine, Request({4}, 20, 77, b->id));
  ASSERT_TRUE(from_a.status.ok() && from_b.status.ok());
  EXPECT_EQ(from_a.tokens, from_b.tokens);
}

TEST_P(EngineTest, ExportImportIntoAnotherEngineContinuesIdentically) {
  std::string bytes;
  SessionId id;
  Outcome expected;
  {
    Harness h = Start();
    id = CreateSession(*h.engine)->id;
    ASSERT_TRUE(RunRequest(*h.engine, Request({3, 1, 4}, 8, 1, id)).status.ok());
    absl::StatusOr<std::string> exported = ExportSession(*h.engine, id);
    ASSERT_TRUE(exported.ok()) << exported.status();
    bytes = *exported;
    expected = RunRequest(*h.engine, Request({1, 5}, 12, 9, id));
  }
  Harness h = Start();
  absl::StatusOr<SessionInfo> imported = ImportSession(*h.engine, bytes);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_NE(imported->id, id);
  EXPECT_EQ(imported->num_tokens, 1 + 3 + 8);
  EXPECT_FALSE(imported->resident);
  const Outcome continued = RunRequest(*h.engine, Request({1, 5}, 12, 9, imported->id));
  EXPECT_EQ(continued.tokens, expected.tokens);
}

TEST_P(EngineTest, CorruptOrForeignImportsAreRejectedAndChangeNothing) {
  Harness h = Start();
  const SessionId id = CreateSession(*h.engine)->id;
  ASSERT_TRUE(RunRequest(*h.engine, Request({3}, 4, 1, id)).status.ok());
  std::string bytes = *ExportSession(*h.engine, id);
  std::string corrupt = bytes;
  corrupt[corrupt.size() / 2] ^= 1;
  EXPECT_EQ(ImportSession(*h.engine, corrupt).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ImportSession(*h.engine, bytes.substr(0, 100)).status().code(),
            absl::StatusCode::kInvalidArgument);

  const Model other = MakeRandomModel(TestConfig(), 2);
  ASSERT_NE(other.fingerprint, model_.fingerprint);
  Harness foreign = Start({}, 8, -1, &other);
  const absl::Status status = ImportSession(*foreign.engine, bytes).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("model"));

  EXPECT_EQ(ListSessions(*h.engine, std::nullopt, 100)->sessions.size(), 1u);
  EXPECT_TRUE(ListSessions(*foreign.engine, std::nullopt, 100)->sessions.empty());
}

TEST_P(EngineTest, ShutdownPersistsSessionsAndCreateRestoresThemWithEveryField) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  const std::vector<TokenId> p1 = {2, 7, 1}, p2 = {8, 2};
  SessionId id;
  Outcome first;
  SessionInfo before;
  {
    Harness h = Start(options);
    id = CreateSession(*h.engine)->id;
    first = RunRequest(*h.engine, Request(p1, 10, 3, id));
    ASSERT_TRUE(first.status.ok());
    before = *GetSession(*h.engine, id);
    ASSERT_TRUE(h.engine->Shutdown(absl::Seconds(5)).ok());
    EXPECT_TRUE(std::filesystem::exists(options.state_dir + "/" + id.value + ".session"));
  }
  // A file the engine cannot use is left alone.
  const std::string junk = options.state_dir + "/" + std::string(32, 'c') + ".session";
  { std::ofstream(junk) << "not a snapshot"; }

  for (int restart = 0; restart < 2; ++restart) {
    Harness h = Start(options);
    absl::StatusOr<SessionInfo> info = GetSession(*h.engine, id);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->num_tokens, 1 + 3 + 10);
    EXPECT_EQ(info->create_time, before.create_time);
    EXPECT_EQ(info->last_use_time, before.last_use_time);
    EXPECT_EQ(info->busy, before.busy);
    // Restoring keeps the file: a crash after this start still finds the session.
    EXPECT_TRUE(std::filesystem::exists(options.state_dir + "/" + id.value + ".session"));
    EXPECT_TRUE(std::filesystem::exists(junk));
  }
  Harness h = Start(options);
  const Outcome continued = RunRequest(*h.engine, Request(p2, 10, 4, id));
  const Outcome whole = RunRequest(*h.engine, Request(Concat({p1, first.tokens, p2}), 10, 4));
  ASSERT_TRUE(continued.status.ok() && whole.status.ok());
  EXPECT_EQ(continued.tokens, whole.tokens);
}

TEST_P(EngineTest, ProposedIdsAreTakenOnceHereAndInStateDir) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  const SessionId proposed{std::string(32, 'a')};
  Harness a = Start(options);
  Harness b = Start(options);  // a replica sharing the directory
  ASSERT_EQ(CreateSession(*a.engine, "", proposed)->id, proposed);
  EXPECT_EQ(CreateSession(*a.engine, "", proposed).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(CreateSession(*b.engine, "", proposed).status().code(),
            absl::StatusCode::kAlreadyExists);
  const std::string snapshot = *ExportSession(*a.engine, proposed);
  EXPECT_EQ(ImportSession(*b.engine, snapshot, "", proposed).status().code(),
            absl::StatusCode::kAlreadyExists);
  const SessionId other{std::string(32, 'b')};
  EXPECT_EQ(ImportSession(*b.engine, snapshot, "", other)->id, other);
}

// Replicas behind a proxy share state_dir: the one a session is routed to loads it from its file
// on first use and continues it exactly; when the session comes back, the first replica reads
// the newer file instead of serving its stale copy; a session removed by one is gone for all.
TEST_P(EngineTest, ReplicasSharingStateDirHandASessionBackAndForthExactly) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  const std::vector<TokenId> p1 = {2, 7, 1}, p2 = {8, 2}, p3 = {5};
  const SessionId id{std::string(32, 'c')};
  Harness a = Start(options);
  Harness b = Start(options);
  auto turn = [&](Harness& h, std::vector<TokenId> prompt, uint64_t seed) {
    GenerateRequest r = Request(std::move(prompt), 6, seed, id);
    r.tenant = "tenant";
    return RunRequest(*h.engine, r);
  };
  ASSERT_TRUE(CreateSession(*a.engine, "tenant", id).ok());
  const Outcome first = turn(a, p1, 3);
  EXPECT_EQ(GetSession(*b.engine, id).status().code(), absl::StatusCode::kNotFound)
      << "another tenant's session is not revealed";
  const Outcome second = turn(b, p2, 4);
  const Outcome third = turn(a, p3, 5);
  ASSERT_TRUE(first.status.ok() && second.status.ok() && third.status.ok()) << third.status;
  const Outcome whole =
      RunRequest(*a.engine, Request(Concat({p1, first.tokens, p2, second.tokens, p3}), 6, 5));
  ASSERT_TRUE(whole.status.ok());
  EXPECT_EQ(third.tokens, whole.tokens);
  EXPECT_EQ(GetSession(*b.engine, id, "tenant")->num_tokens, 1 + 3 + 6 + 2 + 6 + 1 + 6);

  ASSERT_TRUE(DeleteSession(*b.engine, id, "tenant").ok());
  EXPECT_EQ(GetSession(*a.engine, id, "tenant").status().code(), absl::StatusCode::kNotFound);
}

// A session on disk serves every operation as before: with one slot and no host memory, each
// session that leaves the slot goes to disk and is read back from its file on its next use.
TEST_P(EngineTest, SessionsOnDiskServeEveryOperationAsBefore) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  options.sessions.host_state_memory_mib = 0;
  Harness h = Start(options, /*slots=*/1);
  const std::vector<TokenId> p1 = {2, 7, 1}, p2 = {8, 2};
  const SessionId a = CreateSession(*h.engine)->id;
  const SessionId b = CreateSession(*h.engine)->id;
  const Outcome first = RunRequest(*h.engine, Request(p1, 10, 3, a));
  ASSERT_TRUE(first.status.ok());
  ASSERT_TRUE(RunRequest(*h.engine, Request(p2, 10, 5, b)).status.ok());  // a leaves the slot
  absl::StatusOr<SessionInfo> info = GetSession(*h.engine, a);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens, 1 + 3 + 10);
  EXPECT_FALSE(info->resident);
  const std::vector<SessionInfo> listed = ListSessions(*h.engine, std::nullopt, 10)->sessions;
  EXPECT_EQ(listed.size(), 2u);
  absl::StatusOr<std::string> exported = ExportSession(*h.engine, a);
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<SessionInfo> fork = ForkSession(*h.engine, a);
  ASSERT_TRUE(fork.ok()) << fork.status();
  absl::StatusOr<SessionInfo> imported = ImportSession(*h.engine, *exported);
  ASSERT_TRUE(imported.ok()) << imported.status();

  const Outcome whole = RunRequest(*h.engine, Request(Concat({p1, first.tokens, p2}), 10, 4));
  ASSERT_TRUE(whole.status.ok());
  for (const SessionId& id : {a, fork->id, imported->id}) {
    const Outcome continued = RunRequest(*h.engine, Request(p2, 10, 4, id));
    ASSERT_TRUE(continued.status.ok()) << continued.status;
    EXPECT_EQ(continued.tokens, whole.tokens);
  }
  // Every use of a session on disk read its file back; every session leaving the slot went to
  // disk (no host memory).
  const std::string metrics = metrics_.RenderPrometheus();
  for (const std::string name :
       {"linserve_session_evictions_to_disk_total", "linserve_session_loads_from_disk_total"}) {
    EXPECT_THAT(metrics, HasSubstr("\n" + name + " "));
    EXPECT_THAT(metrics, Not(HasSubstr("\n" + name + " 0\n")));
  }
  EXPECT_THAT(metrics, HasSubstr("linserve_session_host_memory_bytes 0\n"));
}

// What the disk holds the moment a client hears a change is done is what a crash leaves: a copy
// of state_dir taken then, opened by a second engine, has every answered change.
TEST_P(EngineTest, EveryAnsweredChangeIsOnDiskBeforeTheClientHearsOfIt) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  auto crash_copy = [&](const std::string& name) {
    EngineOptions copy = options;
    copy.state_dir = dir.Join(name);
    std::filesystem::copy(options.state_dir, copy.state_dir);
    return copy;
  };
  const std::vector<TokenId> p1 = {5, 6}, p2 = {9};
  Harness h = Start(options);
  const SessionId a = CreateSession(*h.engine)->id;
  {
    Harness after_create = Start(crash_copy("c1"));
    absl::StatusOr<SessionInfo> info = GetSession(*after_create.engine, a);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->num_tokens, 0);
  }
  const Outcome turn1 = RunRequest(*h.engine, Request(p1, 6, 1, a));
  ASSERT_TRUE(turn1.status.ok());
  const SessionId b = ForkSession(*h.engine, a)->id;
  const SessionInfo a_info = *GetSession(*h.engine, a);
  absl::StatusOr<std::string> exported = ExportSession(*h.engine, a);
  ASSERT_TRUE(exported.ok());
  const SessionId c = ImportSession(*h.engine, *exported)->id;
  const SessionInfo a_after_export = *GetSession(*h.engine, a);
  EXPECT_GT(a_after_export.last_use_time, a_info.last_use_time);
  {
    Harness crashed = Start(crash_copy("c2"));
    for (const SessionId& id : {a, b, c}) {
      absl::StatusOr<SessionInfo> info = GetSession(*crashed.engine, id);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->num_tokens, 1 + 2 + 6);
    }
    EXPECT_EQ(GetSession(*crashed.engine, a)->last_use_time, a_after_export.last_use_time);
    const Outcome continued = RunRequest(*crashed.engine, Request(p2, 6, 2, b));
    const Outcome whole =
        RunRequest(*crashed.engine, Request(Concat({p1, turn1.tokens, p2}), 6, 2));
    ASSERT_TRUE(continued.status.ok() && whole.status.ok());
    EXPECT_EQ(continued.tokens, whole.tokens);
  }
  ASSERT_TRUE(DeleteSession(*h.engine, b).ok());
  EXPECT_FALSE(std::filesystem::exists(options.state_dir + "/" + b.value + ".session"));
  Harness crashed = Start(crash_copy("c3"));
  EXPECT_EQ(GetSession(*crashed.engine, b).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ListSessions(*crashed.engine, std::nullopt, 10)->sessions.size(), 2u);
}

TEST_P(EngineTest, SessionsIdlePastTheTimeoutWhileDownExpireAtStartAndLoseTheirFiles) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  options.sessions.idle_timeout = absl::Milliseconds(300);
  SessionId id;
  {
    Harness h = Start(options);
    id = CreateSession(*h.engine)->id;
  }
  const std::string file = options.state_dir + "/" + id.value + ".session";
  ASSERT_TRUE(std::filesystem::exists(file));
  absl::SleepFor(absl::Milliseconds(400));
  EngineOptions long_timeout = options;
  long_timeout.sessions.idle_timeout = absl::Hours(1);
  {
    // Under a longer timeout the same session is still alive: expiry counts from the persisted
    // last use, not from the restart.
    Harness h = Start(long_timeout);
    EXPECT_TRUE(GetSession(*h.engine, id).ok());
  }
  Harness h = Start(options);
  EXPECT_EQ(GetSession(*h.engine, id).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(h.engine->Shutdown(absl::Seconds(1)).ok());
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST_P(EngineTest, DrainLetsShortRequestsFinishAndCancelsThePastDeadline) {
  Harness h = Start();
  auto quick = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request({1}, 5, 0), quick).ok());
  // Finishing within the drain deadline.
  ASSERT_TRUE(h.engine->Shutdown(absl::Seconds(30)).ok());
  const Outcome done = quick->Wait();
  EXPECT_TRUE(done.status.ok());
  EXPECT_EQ(done.result.reason, FinishReason::kLength);
  EXPECT_EQ(h.engine->Submit(Request({1}, 5, 0), std::make_shared<RecordingSink>())
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(CreateSession(*h.engine).status().code(), absl::StatusCode::kUnavailable);

  Harness slow = Start();
  slow.backend->CloseGate();
  auto long_running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(slow.engine->Submit(Request({1}, 4000, 0), long_running).ok());
  long_running->WaitForTokens(1);
  std::thread shutdown([&] { EXPECT_TRUE(slow.engine->Shutdown(absl::ZeroDuration()).ok()); });
  slow.backend->Open();
  shutdown.join();
  const Outcome cancelled = long_running->Wait();
  EXPECT_TRUE(cancelled.status.ok());
  EXPECT_EQ(cancelled.result.reason, FinishReason::kCancelled);
  EXPECT_LT(cancelled.tokens.size(), 4000u);
}

TEST_P(EngineTest, BackendFailureFailsTheRequestAndDropsTheUntrustworthySession) {
  Harness h = Start();
  const SessionId id = CreateSession(*h.engine)->id;
  h.backend->set_fail(true);
  const Outcome named = RunRequest(*h.engine, Request({1}, 5, 0, id));
  EXPECT_EQ(named.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(named.status.message()), HasSubstr("session was deleted"));
  EXPECT_EQ(GetSession(*h.engine, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RunRequest(*h.engine, Request({1}, 5, 0)).status.code(),
            absl::StatusCode::kInternal);
  h.backend->set_fail(false);
  EXPECT_TRUE(RunRequest(*h.engine, Request({1}, 5, 0)).status.ok());
  EXPECT_EQ(h.engine->stats().free_slots, 8);
}

// A request that fails after it became active (StartSampling refused it) leaves the queue and
// the running count as they were: neither counts it, so a drain does not wait for it.
TEST_P(EngineTest, StartSamplingFailureLeavesNoRequestCounted) {
  Harness h = Start();
  h.backend->set_fail_start_sampling(true);
  EXPECT_EQ(RunRequest(*h.engine, Request({1}, 5, 0)).status.code(), absl::StatusCode::kInternal);
  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.queued_requests, 0);
  EXPECT_EQ(stats.active_requests, 0);
  h.backend->set_fail_start_sampling(false);
  EXPECT_TRUE(RunRequest(*h.engine, Request({1}, 5, 0)).status.ok());
  const absl::Time start = absl::Now();
  EXPECT_TRUE(h.engine->Shutdown(absl::Seconds(30)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // nothing left to wait for
}

TEST_P(EngineTest, LongPromptNeverStallsADecodingSession) {
  EngineOptions options;
  options.scheduler.prefill_token_budget = 8;
  // One backend call per chunk: no prefix checkpoint splits the last one.
  options.prefix.memory_budget_bytes = 0;
  Harness h = Start(options);
  auto decoding = std::make_shared<RecordingSink>();
  h.backend->CloseGate();
  ASSERT_TRUE(h.engine->Submit(Request({1, 2, 3}, 300, 0), decoding).ok());
  decoding->WaitForTokens(1);  // held in its first decode: it outlives the long prompt
  auto long_prompt = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(Request(std::vector<TokenId>(400, 65), 3, 0), long_prompt).ok());
  h.backend->Open();
  ASSERT_TRUE(long_prompt->Wait().status.ok());
  ASSERT_TRUE(decoding->Wait().status.ok());
  const std::vector<FakeBackend::Call> calls = h.backend->calls();
  int prefills = 0;
  for (size_t i = 1; i < calls.size(); ++i) {
    if (calls[i].kind != FakeBackend::Call::kPrefillBatch) continue;
    ++prefills;
    EXPECT_LE(calls[i].size, 8);
    // Each step decodes first, so every chunk follows a decode of the streaming session.
    EXPECT_EQ(calls[i - 1].kind, FakeBackend::Call::kDecode) << "call " << i;
  }
  EXPECT_EQ(prefills, 51);  // 401 tokens (BOS + 400) in chunks of 8
}

TEST_P(EngineTest, PromptsOfAStepShareOneBatchedPrefillAndAnIdleEngineFeedsLargeChunks) {
  EngineOptions options;
  options.scheduler.prefill_token_budget = 64;
  options.scheduler.idle_prefill_token_budget = 256;
  // Chunks as planned: no prefix checkpoint ends one early.
  options.prefix.memory_budget_bytes = 0;
  Harness h = Start(options);
  auto decoding = std::make_shared<RecordingSink>();
  h.backend->CloseGate();
  ASSERT_TRUE(h.engine->Submit(Request({1, 2, 3}, 40, 0), decoding).ok());
  decoding->WaitForTokens(1);
  // Held in its first decode while the prompts queue up: once the engine waits at the gate it has
  // admitted what its step will admit, so the four prompts all wait for the next step (submitted
  // before, some could join this step's prefill and split the four).
  while (!h.backend->WaitingAtGate()) absl::SleepFor(absl::Milliseconds(1));
  std::vector<std::shared_ptr<RecordingSink>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(
        h.engine->Submit(Request(std::vector<TokenId>(10, 65 + i), 2, 0), prompts.back()).ok());
  }
  h.backend->Open();
  for (auto& sink : prompts) ASSERT_TRUE(sink->Wait().status.ok());
  ASSERT_TRUE(decoding->Wait().status.ok());
  // Alone, a 1000-token prompt goes in chunks of the idle budget.
  ASSERT_TRUE(RunRequest(*h.engine, Request(std::vector<TokenId>(1000, 70), 1, 0)).status.ok());

  std::vector<FakeBackend::Call> batches;
  for (const FakeBackend::Call& call : h.backend->calls()) {
    if (call.kind == FakeBackend::Call::kPrefillBatch) batches.push_back(call);
  }
  // The first prompt, then the four (BOS + 10 tokens each) in one call beside the decode, then
  // 1001 tokens in calls of 256.
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(batches[1].items, 4);
  EXPECT_EQ(batches[1].size, 44);
  for (size_t i = 2; i < 5; ++i) EXPECT_EQ(batches[i].size, 256);
  EXPECT_EQ(batches[5].size, 1001 - 3 * 256);
}

TEST_P(EngineTest, IdleSessionsExpire) {
  EngineOptions options;
  options.sessions.idle_timeout = absl::Milliseconds(100);
  Harness h = Start(options);
  const SessionId id = CreateSession(*h.engine)->id;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (GetSession(*h.engine, id).ok() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(GetSession(*h.engine, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(metrics_.RenderPrometheus(), HasSubstr("linserve_sessions_expired_total 1\n"));
}

TEST_P(EngineTest, SessionOperations) {
  EngineOptions options;
  options.sessions.max_sessions = 3;
  Harness h = Start(options);
  const SessionId a = CreateSession(*h.engine)->id;
  const SessionId b = CreateSession(*h.engine)->id;
  EXPECT_TRUE(ForkSession(*h.engine, a).ok());
  EXPECT_EQ(CreateSession(*h.engine).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ForkSession(*h.engine, a).status().code(), absl::StatusCode::kResourceExhausted);
  const std::string bytes = *ExportSession(*h.engine, a);
  EXPECT_EQ(ImportSession(*h.engine, bytes).status().code(),
            absl::StatusCode::kResourceExhausted);

  absl::StatusOr<SessionPage> page = ListSessions(*h.engine, std::nullopt, 2);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->sessions.size(), 2u);
  ASSERT_TRUE(page->next_after.has_value());
  absl::StatusOr<SessionPage> rest = ListSessions(*h.engine, page->next_after, 2);
  EXPECT_EQ(rest->sessions.size(), 1u);
  EXPECT_FALSE(rest->next_after.has_value());

  EXPECT_TRUE(DeleteSession(*h.engine, b).ok());
  EXPECT_EQ(DeleteSession(*h.engine, b).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetSession(*h.engine, b).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(CreateSession(*h.engine).ok());
}

// Another owner's session is indistinguishable from an unknown id: the same code and the same
// message but for the id, for every operation; lists hold only the caller's sessions.
TEST_P(EngineTest, SessionsOfAnotherOwnerAreNotFoundExactlyLikeUnknownIds) {
  Harness h = Start();
  const SessionId a = CreateSession(*h.engine, "alice")->id;
  ASSERT_TRUE(RunRequest(*h.engine, [&] {
                GenerateRequest r = Request({3, 1, 4}, 5, 1, a);
                r.tenant = "alice";
                return r;
              }()).status.ok());
  const SessionInfo before = *GetSession(*h.engine, a, "alice");
  const SessionId unknown{std::string(32, 'f')};

  // The message for `id` with the id itself blanked out.
  auto shape = [](const absl::Status& status, const SessionId& id) {
    std::string message(status.message());
    const size_t at = message.find(id.value);
    if (at != std::string::npos) message.replace(at, id.value.size(), "<id>");
    return std::make_pair(status.code(), message);
  };
  auto generate = [&](const SessionId& id) {
    GenerateRequest r = Request({2}, 3, 1, id);
    r.tenant = "bob";
    return RunRequest(*h.engine, r).status;
  };
  const std::vector<std::pair<std::string, std::function<absl::Status(const SessionId&)>>> ops = {
      {"Get", [&](const SessionId& id) { return GetSession(*h.engine, id, "bob").status(); }},
      {"Fork", [&](const SessionId& id) { return ForkSession(*h.engine, id, "bob").status(); }},
      {"Delete", [&](const SessionId& id) { return DeleteSession(*h.engine, id, "bob"); }},
      {"Export",
       [&](const SessionId& id) { return ExportSession(*h.engine, id, "bob").status(); }},
      {"Generate", generate},
  };
  for (const auto& [name, op] : ops) {
    const absl::Status theirs = op(a);
    EXPECT_EQ(theirs.code(), absl::StatusCode::kNotFound) << name << ": " << theirs;
    EXPECT_EQ(shape(theirs, a), shape(op(unknown), unknown)) << name;
  }
  // Bob's attempts left alice's session as it was.
  const SessionInfo after = *GetSession(*h.engine, a, "alice");
  EXPECT_EQ(after.num_tokens, before.num_tokens);
  EXPECT_EQ(after.last_use_time, before.last_use_time);
  // The default tenant ("") is an owner like any other.
  EXPECT_EQ(GetSession(*h.engine, a).status().code(), absl::StatusCode::kNotFound);

  EXPECT_TRUE(ListSessions(*h.engine, std::nullopt, 10, "bob")->sessions.empty());
  const SessionId b = CreateSession(*h.engine, "bob")->id;
  absl::StatusOr<SessionPage> bobs = ListSessions(*h.engine, std::nullopt, 1, "bob");
  ASSERT_EQ(bobs->sessions.size(), 1u);
  EXPECT_EQ(bobs->sessions[0].id, b);
  EXPECT_FALSE(bobs->next_after.has_value()) << "alice's session must not make a next page";

  // A fork belongs to the forker; an import to the importer, whoever exported it.
  const SessionId fork = ForkSession(*h.engine, a, "alice")->id;
  EXPECT_TRUE(GetSession(*h.engine, fork, "alice").ok());
  EXPECT_EQ(GetSession(*h.engine, fork, "bob").status().code(), absl::StatusCode::kNotFound);
  const SessionId copy = ImportSession(*h.engine, *ExportSession(*h.engine, a, "alice"), "bob")->id;
  EXPECT_TRUE(GetSession(*h.engine, copy, "bob").ok());
  EXPECT_EQ(GetSession(*h.engine, copy, "alice").status().code(), absl::StatusCode::kNotFound);

  const absl::StatusOr<SessionPage> alice_page =
      ListSessions(*h.engine, std::nullopt, 10, "alice");
  ASSERT_TRUE(alice_page.ok()) << alice_page.status();
  std::vector<SessionId> alices;
  for (const SessionInfo& info : alice_page->sessions) alices.push_back(info.id);
  std::vector<SessionId> expected = {a, fork};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(alices, expected);
}

TEST_P(EngineTest, OwnersAreRestoredWithTheirSessions) {
  ScopedTempDir dir;
  EngineOptions options;
  options.state_dir = dir.Join("state");
  SessionId id;
  {
    Harness h = Start(options);
    id = CreateSession(*h.engine, "alice")->id;
    ASSERT_TRUE(h.engine->Shutdown(absl::Seconds(5)).ok());
  }
  Harness h = Start(options);
  EXPECT_TRUE(GetSession(*h.engine, id, "alice").ok());
  EXPECT_EQ(GetSession(*h.engine, id, "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(GetSession(*h.engine, id).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ListSessions(*h.engine, std::nullopt, 10, "alice")->sessions.size(), 1u);
  EXPECT_TRUE(ListSessions(*h.engine, std::nullopt, 10, "bob")->sessions.empty());
}

// Quotas: tenant B exhausting its own quotas (sessions, queue, prefix cache, turn boundaries)
// leaves tenant A's sessions, queue and prefix hits untouched. Without the quotas B's use
// would evict A's prefix state and boundaries (the global budgets hold fewer than B stores) and
// could fill the queue.
TEST_P(EngineTest, ATenantExhaustingItsQuotasLeavesAnotherTenantUntouched) {
  const int64_t state_bytes = model_.config.StateFloatsPerSlot() * int64_t{sizeof(float)};
  EngineOptions options;
  options.sessions.max_sessions = 4;
  options.sessions.tenant_max_sessions = 2;
  options.max_queue_depth = 8;
  options.tenant_max_queued = 2;
  // Every prefix state and boundary here costs less than a unit, and at least state_bytes.
  const int64_t unit = state_bytes + 1024;
  options.prefix = {.memory_budget_bytes = 8 * unit,
                    .tenant_budget_bytes = 4 * unit,
                    .checkpoint_interval = 0,
                    .min_tokens = 4};
  options.turn_boundaries = {
      .per_session = 8, .memory_budget_bytes = 6 * unit, .tenant_budget_bytes = 3 * unit};
  Harness h = Start(options);
  auto as = [](std::string owner, GenerateRequest r) {
    r.tenant = std::move(owner);
    return r;
  };

  // A: a session with a turn boundary, and a cached prefix.
  const SessionId a = CreateSession(*h.engine, "alice")->id;
  ASSERT_TRUE(RunRequest(*h.engine, as("alice", Request({5, 6, 7}, 3, 1, a))).status.ok());
  const std::vector<int64_t> a_boundaries = GetSession(*h.engine, a, "alice")->boundaries;
  ASSERT_EQ(a_boundaries.size(), 2u);
  std::vector<TokenId> a_prompt;
  for (TokenId t = 10; t < 40; ++t) a_prompt.push_back(t);
  ASSERT_TRUE(RunRequest(*h.engine, as("alice", Request(a_prompt, 3, 1))).status.ok());

  // B: two sessions, then refused; many turns and many distinct prompts.
  std::vector<SessionId> b_sessions;
  for (int i = 0; i < 2; ++i) b_sessions.push_back(CreateSession(*h.engine, "bob")->id);
  for (const absl::Status& refused : {CreateSession(*h.engine, "bob").status(),
                                      ForkSession(*h.engine, b_sessions[0], "bob").status()}) {
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(refused.message()), HasSubstr("tenant_max_sessions (2)"));
  }
  for (int turn = 0; turn < 10; ++turn) {
    for (const SessionId& id : b_sessions) {
      ASSERT_TRUE(
          RunRequest(*h.engine, as("bob", Request({static_cast<TokenId>(turn + 1)}, 3, 1, id)))
              .status.ok());
    }
    std::vector<TokenId> prompt;
    for (TokenId t = 0; t < 30; ++t) prompt.push_back(static_cast<TokenId>(100 + turn * 7 + t));
    ASSERT_TRUE(RunRequest(*h.engine, as("bob", Request(prompt, 3, 1))).status.ok());
  }

  // A's sessions: its quota is its own; its boundary is kept and its prefix still hits.
  const SessionId a2 = CreateSession(*h.engine, "alice")->id;
  absl::StatusOr<SessionPage> page = ListSessions(*h.engine, std::nullopt, 10, "alice");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->sessions.size(), 2u);
  EXPECT_EQ(GetSession(*h.engine, a, "alice")->boundaries, a_boundaries);
  const Outcome hit = RunRequest(*h.engine, as("alice", Request(a_prompt, 3, 1)));
  ASSERT_TRUE(hit.status.ok());
  EXPECT_EQ(hit.result.usage.cached_prompt_tokens, 30);  // BOS + 30 tokens, all but the last

  // The queue: with the engine held in a step, B's third waiting request is refused; A's are
  // not.
  h.backend->CloseGate();
  auto running = std::make_shared<RecordingSink>();
  ASSERT_TRUE(h.engine->Submit(as("bob", Request({1}, 3, 0)), running).ok());
  running->WaitForTokens(1);
  // The engine thread is now held in Decode, having admitted what its step admits: what follows
  // queues (queued in between, a request could be admitted and leave the queue's count).
  while (!h.backend->WaitingAtGate()) absl::SleepFor(absl::Milliseconds(1));
  std::vector<std::shared_ptr<RecordingSink>> queued;
  for (const char* owner : {"bob", "bob", "alice", "alice"}) {
    queued.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(h.engine->Submit(as(owner, Request({2}, 3, 0)), queued.back()).ok()) << owner;
  }
  const absl::StatusOr<JobId> rejected =
      h.engine->Submit(as("bob", Request({2}, 3, 0)), std::make_shared<RecordingSink>());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rejected.status().message()), HasSubstr("tenant_max_queued (2)"));
  EXPECT_EQ(GetSession(*h.engine, b_sessions[0], "bob").status().code(),
            absl::StatusCode::kResourceExhausted);
  h.backend->Open();
  EXPECT_TRUE(running->Wait().status.ok());
  for (auto& sink : queued) EXPECT_TRUE(sink->Wait().status.ok());
  EXPECT_TRUE(RunRequest(*h.engine, as("bob", Request({2}, 3, 0))).status.ok());
  EXPECT_TRUE(GetSession(*h.engine, a2, "alice").ok());
}

TEST(FairTenantSharesTest, DivideEachGlobalLimitAmongTheTenantsAndKeepExplicitQuotas) {
  EngineOptions options;
  options.sessions.max_sessions = 4096;
  options.max_queue_depth = 256;
  options.prefix.memory_budget_bytes = int64_t{1} << 30;
  options.turn_boundaries.memory_budget_bytes = 0;
  options.tenant_max_queued = 100;
  EngineOptions one = options;
  ApplyFairTenantShares(1, one);
  EXPECT_EQ(one.sessions.tenant_max_sessions, 0);  // one tenant: the global limits alone
  EXPECT_EQ(one.prefix.tenant_budget_bytes, 0);
  ApplyFairTenantShares(3, options);
  EXPECT_EQ(options.sessions.tenant_max_sessions, 1365);
  EXPECT_EQ(options.tenant_max_queued, 100);  // set explicitly
  EXPECT_EQ(options.prefix.tenant_budget_bytes, (int64_t{1} << 30) / 3);
  EXPECT_EQ(options.turn_boundaries.tenant_budget_bytes, 0);  // a budget of 0 stays off
  EngineOptions many;
  many.max_queue_depth = 4;
  ApplyFairTenantShares(10, many);
  EXPECT_EQ(many.tenant_max_queued, 1);  // at least 1
}

TEST_P(EngineTest, CreateValidatesOptions) {
  EngineOptions options;
  options.max_queue_depth = 0;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      model_, std::make_unique<FakeBackend>(model_.config, 2), options, metrics_);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("max_queue_depth"));
  EngineOptions queue_quota;
  queue_quota.tenant_max_queued = 257;
  engine = Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), queue_quota,
                          metrics_);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()),
              HasSubstr("tenant_max_queued must be in [0, max_queue_depth = 256]"));
  EngineOptions emitters;
  emitters.emitter_threads = 65;
  engine = Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), emitters,
                          metrics_);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()),
              HasSubstr("emitter_threads must be in [0, 64], got 65"));

  ScopedTempDir dir;
  { std::ofstream(dir.Join("file")) << "x"; }
  EngineOptions unusable_dir;
  unusable_dir.state_dir = dir.Join("file") + "/state";  // under a regular file
  engine = Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), unusable_dir,
                          metrics_);
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("state_dir"));

  // A missing directory is created, parents included.
  EngineOptions missing;
  missing.state_dir = dir.Join("a/b/state");
  engine = Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), missing,
                          metrics_);
  EXPECT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE(std::filesystem::is_directory(missing.state_dir));
}

// Sessions that end early (a stop token) while the pipelined loop has already fed their last
// token to a step in flight (with launch-ahead, fed on the device before the host saw it): that
// step's pick is thrown away, the session keeps exactly what was sent, and the slot's penalty
// counts are the session's again. Every turn's tokens equal the synchronous loop's (so each
// turn started from the state of exactly the session's tokens), and only sent tokens are
// counted.
TEST(EngineLoopsTest, PipelinedLoopsGiveTheSynchronousTokensWhenSessionsStopEarly) {
  const Model model = MakeRandomModel(TestConfig(), 1);
  constexpr int kSessions = 6;
  constexpr int kTurns = 3;
  auto request = [](int session, int turn, const SessionId& id,
                    const std::vector<TokenId>& stop_ids) {
    GenerateRequest r;
    r.request_id = absl::StrCat("s", session, "t", turn);
    r.prompt = {static_cast<TokenId>(65 + session), static_cast<TokenId>(70 + turn)};
    r.max_new_tokens = 24;
    r.sampling.seed = static_cast<uint64_t>(100 * session + turn);
    r.sampling.temperature = 0.9f;
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.presence_penalty = 0.3f;
    r.sampling.frequency_penalty = 0.4f;
    r.ignore_eos = true;
    r.stop_token_ids = stop_ids;
    r.session_id = id;
    return r;
  };
  struct Run {
    std::vector<std::vector<TokenId>> tokens;  // [turn · kSessions + session]
    std::vector<int64_t> session_tokens;
    int64_t decode_rows = 0;
    double generated = 0;
  };
  auto run = [&](EngineLoop loop, const std::vector<TokenId>& stop_ids) {
    MetricsRegistry metrics;
    auto fake = std::make_unique<FakeBackend>(model.config, kSessions);
    FakeBackend* fake_ptr = fake.get();
    std::unique_ptr<Backend> backend = std::move(fake);
    backend = BackendForLoop(std::move(backend), loop);
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model, std::move(backend), {}, metrics);
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<SessionId> ids;
    for (int i = 0; i < kSessions; ++i) {
      absl::StatusOr<SessionInfo> info = CreateSession(**engine);
      EXPECT_TRUE(info.ok());
      ids.push_back(info->id);
    }
    Run out;
    for (int turn = 0; turn < kTurns; ++turn) {
      std::vector<std::shared_ptr<RecordingSink>> sinks;
      for (int i = 0; i < kSessions; ++i) {
        sinks.push_back(std::make_shared<RecordingSink>());
        EXPECT_TRUE((*engine)->Submit(request(i, turn, ids[i], stop_ids), sinks.back()).ok());
      }
      for (auto& sink : sinks) {
        Outcome outcome = sink->Wait();
        EXPECT_TRUE(outcome.status.ok()) << outcome.status;
        out.tokens.push_back(outcome.tokens);
      }
    }
    for (const SessionId& id : ids) {
      absl::StatusOr<SessionInfo> info = GetSession(**engine, id);
      EXPECT_TRUE(info.ok());
      out.session_tokens.push_back(info->num_tokens);
    }
    EXPECT_TRUE((*engine)->Shutdown(absl::ZeroDuration()).ok());
    for (const FakeBackend::Call& call : fake_ptr->calls()) {
      if (call.kind == FakeBackend::Call::kDecode) out.decode_rows += call.size;
    }
    out.generated = metrics.GetCounter("linserve_generated_tokens_total", "").value();
    return out;
  };

  // Stop at a token the unstopped run generates in its first turn, a few tokens in.
  const Run unstopped = run(EngineLoop::kSynchronous, {});
  const std::vector<TokenId> stop_ids = {unstopped.tokens[0][5], unstopped.tokens[1][3]};
  const Run synchronous = run(EngineLoop::kSynchronous, stop_ids);

  int64_t sent = 0, early = 0;
  for (const auto& tokens : synchronous.tokens) {
    sent += static_cast<int64_t>(tokens.size());
    early += tokens.size() < 24 ? 1 : 0;
  }
  ASSERT_GT(early, 0) << "no request stopped early: the test would not exercise the pipeline";
  EXPECT_EQ(synchronous.generated, static_cast<double>(sent));
  for (EngineLoop loop : {EngineLoop::kPipelined, EngineLoop::kLaunchAhead}) {
    SCOPED_TRACE(EngineLoopName(loop));
    const Run pipelined = run(loop, stop_ids);
    EXPECT_EQ(pipelined.tokens, synchronous.tokens);
    EXPECT_EQ(pipelined.session_tokens, synchronous.session_tokens);
    EXPECT_EQ(pipelined.generated, static_cast<double>(sent));
    // The synchronous loop decodes exactly the tokens it feeds; the pipelined ones also fed
    // the last token of each early stop to a step whose pick nobody saw.
    EXPECT_GT(pipelined.decode_rows, synchronous.decode_rows);
  }
}

INSTANTIATE_TEST_SUITE_P(Loops, EngineTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

}  // namespace
}  // namespace linserve
