// The engine's overlapped loop (launch-ahead, docs/architecture.md §2.2) over DeviceClockBackend,
// the CPU stand-in for a GPU's timing: a device thread of its own completes each decode step a
// set time after it starts, with two steps in flight, so the host launches step N+1 fed from
// step N's picks before it has seen them. Against the synchronous engine over the same
// FakeBackend (whose Prefill equals token-by-token Decode exactly): whatever ends a request,
// the session's state is that of exactly its tokens; every stream gets exactly the synchronous
// engine's tokens, once and in order, under random cancels; a cancelled request frees its slot
// within two decode steps.
#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine_test_util.h"
#include "fake_backend.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"
#include "tests/testing/device_clock_backend.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

constexpr TokenId kBos = 256;
// FakeBackend puts all mass on EOS from this position on.
constexpr int64_t kEosAfter = 1000;

ModelConfig TestConfig() {
  ModelConfig config = TinyConfig();
  config.bos_token_id = kBos;
  return config;
}

// An engine over FakeBackend, as it is (synchronous) or behind the stand-in with launch-ahead.
struct Harness {
  std::unique_ptr<Engine> engine;
  FakeBackend* fake = nullptr;
};

Harness Start(const Model& model, MetricsRegistry& metrics, bool overlapped, int32_t slots,
              absl::Duration step_time = absl::Microseconds(300)) {
  auto fake = std::make_unique<FakeBackend>(model.config, slots, kEosAfter);
  Harness h;
  h.fake = fake.get();
  std::unique_ptr<Backend> backend = std::move(fake);
  if (overlapped) {
    absl::StatusOr<std::unique_ptr<DeviceClockBackend>> device =
        DeviceClockBackend::Create(std::move(backend), step_time, /*steps_in_flight=*/2);
    EXPECT_TRUE(device.ok()) << device.status();
    backend = *std::move(device);
  }
  EngineOptions options;
  options.scheduler.max_batch_size = slots;
  options.max_queue_depth = std::max(256, 2 * slots);
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model, std::move(backend), options, metrics);
  EXPECT_TRUE(engine.ok()) << engine.status();
  h.engine = *std::move(engine);
  return h;
}

GenerateRequest Request(std::vector<TokenId> prompt, int32_t max_new_tokens, uint64_t seed) {
  GenerateRequest r;
  r.request_id = absl::StrCat("seed", seed);
  r.prompt = std::move(prompt);
  r.max_new_tokens = max_new_tokens;
  r.sampling.seed = seed;
  r.sampling.temperature = 0.9f;
  r.ignore_eos = true;
  return r;
}

std::vector<TokenId> Prompt(int seed, int length) {
  std::vector<TokenId> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back(static_cast<TokenId>(33 + (seed * 7 + i) % 90));
  return prompt;
}

// A request that ends one way, the way to end it, and what it left.
struct Case {
  std::string name;
  GenerateRequest request;
  FinishReason expected;
  bool cancel = false;  // cancelled after its fifth token
  SessionId session;
  Outcome outcome;
};

// What the follow-up request on a session gives; equal follow-ups (tokens and logprobs, from a
// seeded sampler) mean equal states before them.
Outcome FollowUp(Engine& engine, std::vector<TokenId> prompt, std::optional<SessionId> session) {
  GenerateRequest r = Request(std::move(prompt), 6, 99);
  r.top_logprobs = 3;
  r.session_id = std::move(session);
  return RunRequest(engine, std::move(r));
}

TEST(EngineOverlapTest, EveryFinishReasonLeavesTheStateOfExactlyTheSessionsTokens) {
  const Model model = MakeRandomModel(TestConfig(), 1);
  MetricsRegistry sync_metrics, overlap_metrics;
  Harness sync = Start(model, sync_metrics, /*overlapped=*/false, 8);
  Harness overlap = Start(model, overlap_metrics, /*overlapped=*/true, 8);

  // The stop conditions come from a free run of the same request.
  const GenerateRequest base = Request(Prompt(1, 3), 40, 5);
  const Outcome free_run = RunRequest(*sync.engine, base);
  ASSERT_EQ(free_run.tokens.size(), 40u);
  size_t k = 3;  // a token that does not occur before it, a few tokens in
  while (std::find(free_run.tokens.begin(), free_run.tokens.begin() + k, free_run.tokens[k]) !=
         free_run.tokens.begin() + k) {
    ++k;
  }
  size_t p = free_run.pieces.size() / 2;  // a non-empty piece from the middle, as a stop string
  while (p < free_run.pieces.size() && free_run.pieces[p].empty()) ++p;
  ASSERT_LT(p, free_run.pieces.size());

  auto make_case = [](std::string name, GenerateRequest request, FinishReason expected) {
    Case c;
    c.name = std::move(name);
    c.request = std::move(request);
    c.expected = expected;
    return c;
  };
  std::vector<Case> cases;
  cases.push_back(make_case("length", base, FinishReason::kLength));
  cases.push_back(make_case("stop token", base, FinishReason::kStop));
  cases.back().request.stop_token_ids = {free_run.tokens[k]};
  cases.push_back(make_case("stop string", base, FinishReason::kStop));
  cases.back().request.stop = {free_run.pieces[p]};
  // EOS: a prompt that ends near kEosAfter, so that EOS comes a few tokens in.
  cases.push_back(make_case(
      "eos", Request(Prompt(2, static_cast<int>(kEosAfter) - 8), 40, 6), FinishReason::kEos));
  cases.back().request.ignore_eos = false;
  cases.push_back(make_case("cancel", Request(Prompt(3, 3), 600, 7), FinishReason::kCancelled));
  cases.back().cancel = true;

  // All at once on the overlapped engine, each on a session of its own.
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<JobId> jobs;
  for (Case& c : cases) {
    absl::StatusOr<SessionInfo> info = CreateSession(*overlap.engine);
    ASSERT_TRUE(info.ok()) << info.status();
    c.session = info->id;
    c.request.session_id = c.session;
    sinks.push_back(std::make_shared<RecordingSink>());
    absl::StatusOr<JobId> job = overlap.engine->Submit(c.request, sinks.back());
    ASSERT_TRUE(job.ok()) << job.status();
    jobs.push_back(*job);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    if (!cases[i].cancel) continue;
    sinks[i]->WaitForTokens(5);
    overlap.engine->Cancel(jobs[i]);
  }
  for (size_t i = 0; i < cases.size(); ++i) cases[i].outcome = sinks[i]->Wait();

  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    if (c.cancel) {
      EXPECT_EQ(c.outcome.status.code(), absl::StatusCode::kCancelled) << c.outcome.status;
      EXPECT_GE(c.outcome.tokens.size(), 5u);
      EXPECT_LT(c.outcome.tokens.size(), 600u);
    } else {
      ASSERT_TRUE(c.outcome.status.ok()) << c.outcome.status;
      EXPECT_EQ(c.outcome.result.reason, c.expected);
      // The synchronous engine stops at the same token.
      GenerateRequest alone = c.request;
      alone.session_id.reset();
      EXPECT_EQ(RunRequest(*sync.engine, alone).tokens, c.outcome.tokens);
    }
    // The session holds BOS, the prompt and every token sent to the client...
    std::vector<TokenId> history = c.request.prompt;
    history.insert(history.end(), c.outcome.tokens.begin(), c.outcome.tokens.end());
    absl::StatusOr<SessionInfo> info = GetSession(*overlap.engine, c.session);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->num_tokens, static_cast<int64_t>(history.size()) + 1);
    // ...and its state is theirs: a follow-up continues exactly as one after feeding them all
    // to a fresh session of the synchronous engine.
    const std::vector<TokenId> next = {'o', 'k'};
    const Outcome continued = FollowUp(*overlap.engine, next, c.session);
    history.insert(history.end(), next.begin(), next.end());
    const Outcome reference = FollowUp(*sync.engine, history, std::nullopt);
    ASSERT_TRUE(continued.status.ok()) << continued.status;
    ASSERT_TRUE(reference.status.ok()) << reference.status;
    EXPECT_EQ(continued.tokens, reference.tokens);
    ASSERT_EQ(continued.details.size(), reference.details.size());
    for (size_t i = 0; i < continued.details.size(); ++i) {
      EXPECT_EQ(continued.details[i].logprob, reference.details[i].logprob) << "token " << i;
    }
  }
  EXPECT_TRUE(overlap.engine->Shutdown(absl::ZeroDuration()).ok());
}

TEST(EngineOverlapTest, StreamsGetTheSynchronousTokensOnceAndInOrderUnderRandomCancels) {
  constexpr int kStreams = 256;
  constexpr int32_t kTokens = 400;
  const Model model = MakeRandomModel(TestConfig(), 1);
  MetricsRegistry sync_metrics, overlap_metrics;
  Harness sync = Start(model, sync_metrics, /*overlapped=*/false, kStreams);
  Harness overlap =
      Start(model, overlap_metrics, /*overlapped=*/true, kStreams, absl::Microseconds(100));

  auto submit = [&](Engine& engine, std::vector<std::shared_ptr<RecordingSink>>& sinks,
                    std::vector<JobId>& jobs) {
    for (int i = 0; i < kStreams; ++i) {
      sinks.push_back(std::make_shared<RecordingSink>());
      absl::StatusOr<JobId> job =
          engine.Submit(Request(Prompt(i, 1 + i % 5), kTokens, 1000 + i), sinks.back());
      ASSERT_TRUE(job.ok()) << job.status();
      jobs.push_back(*job);
    }
  };
  std::vector<std::shared_ptr<RecordingSink>> reference_sinks, sinks;
  std::vector<JobId> reference_jobs, jobs;
  submit(*sync.engine, reference_sinks, reference_jobs);
  submit(*overlap.engine, sinks, jobs);

  // A third of the streams cancelled at random moments while they run.
  std::mt19937 rng(42);
  std::vector<int> order(kStreams);
  for (int i = 0; i < kStreams; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<bool> cancelled(kStreams, false);
  for (int n = 0; n < kStreams / 3; ++n) {
    const int i = order[n];
    cancelled[i] = true;
    sinks[i]->WaitForTokens(std::uniform_int_distribution<size_t>(0, kTokens / 2)(rng));
    overlap.engine->Cancel(jobs[i]);
  }

  int ended_by_cancel = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    const Outcome reference = reference_sinks[i]->Wait();
    const Outcome out = sinks[i]->Wait();
    ASSERT_TRUE(reference.status.ok()) << reference.status;
    ASSERT_EQ(reference.tokens.size(), static_cast<size_t>(kTokens));
    if (!cancelled[i] || out.status.ok()) {
      ASSERT_TRUE(out.status.ok()) << out.status;
      EXPECT_EQ(out.tokens, reference.tokens);
      continue;
    }
    EXPECT_EQ(out.status.code(), absl::StatusCode::kCancelled) << out.status;
    ++ended_by_cancel;
    ASSERT_LE(out.tokens.size(), reference.tokens.size());
    EXPECT_TRUE(std::equal(out.tokens.begin(), out.tokens.end(), reference.tokens.begin()));
    EXPECT_EQ(out.result.usage.generated_tokens, static_cast<int32_t>(out.tokens.size()));
  }
  // The first cancels come while every stream is young (a stream lives 400 steps).
  EXPECT_GT(ended_by_cancel, 0);
  const EngineStats stats = overlap.engine->stats();
  EXPECT_EQ(stats.active_requests, 0);
  EXPECT_EQ(stats.free_slots, kStreams);
  EXPECT_TRUE(overlap.engine->Shutdown(absl::ZeroDuration()).ok());
}

// Decode steps the backend has run so far.
size_t DecodeCalls(const FakeBackend& fake) {
  size_t n = 0;
  for (const FakeBackend::Call& call : fake.calls()) n += call.kind == FakeBackend::Call::kDecode;
  return n;
}

// Once Cancel is called, at most two more decode steps run for the request — the one launched
// ahead and not yet run, and one the engine may launch before its inbox sees the cancel — and by
// the time its client hears of the end, its slot is free.
TEST(EngineOverlapTest, ACancelledRequestFreesItsSlotWithinTwoDecodeSteps) {
  const Model model = MakeRandomModel(TestConfig(), 1);
  MetricsRegistry metrics;
  Harness overlap = Start(model, metrics, /*overlapped=*/true, 4, absl::Microseconds(500));
  for (int round = 0; round < 5; ++round) {
    auto sink = std::make_shared<RecordingSink>();
    absl::StatusOr<JobId> job =
        overlap.engine->Submit(Request(Prompt(round, 4), 1000, round), sink);
    ASSERT_TRUE(job.ok()) << job.status();
    sink->WaitForTokens(3 + static_cast<size_t>(round));
    overlap.engine->Cancel(*job);
    const size_t before = DecodeCalls(*overlap.fake);  // after: steps since are after the cancel
    const Outcome out = sink->Wait();
    EXPECT_EQ(out.status.code(), absl::StatusCode::kCancelled) << out.status;
    EXPECT_EQ(overlap.engine->stats().free_slots, 4);
    // The request was the only one: every decode step after the cancel was its.
    EXPECT_LE(DecodeCalls(*overlap.fake) - before, 2u);
  }
  EXPECT_TRUE(overlap.engine->Shutdown(absl::ZeroDuration()).ok());
}

}  // namespace
}  // namespace linserve
