// Prefix reuse in the engine: a request that resends a known conversation reads only its new
// tokens and continues exactly as a cold run; checkpoints at turn boundaries and inside long
// prefills; misses and their reasons; owners never share states.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "fake_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr TokenId kBos = 256;

ModelConfig TestConfig() {
  ModelConfig config = TinyConfig();
  config.bos_token_id = kBos;
  return config;
}

std::vector<TokenId> Range(TokenId from, int n) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back((from + i) % 250);
  return out;
}

std::vector<TokenId> Concat(std::initializer_list<std::vector<TokenId>> parts) {
  std::vector<TokenId> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Prefix options for tests: small minimum, no interval checkpoints unless asked.
PrefixStoreOptions Prefix(int64_t budget = 64 << 20, int32_t interval = 0) {
  return {.memory_budget_bytes = budget, .checkpoint_interval = interval, .min_tokens = 4};
}

// Every test runs under each engine loop (kEngineLoops).
class EnginePrefixTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  std::unique_ptr<Engine> Start(PrefixStoreOptions prefix, FakeBackend** fake_out = nullptr,
                                MetricsRegistry* metrics = nullptr) {
    auto fake = std::make_unique<FakeBackend>(model_.config, 8);
    if (fake_out != nullptr) *fake_out = fake.get();
    std::unique_ptr<Backend> backend = std::move(fake);
    backend = BackendForLoop(std::move(backend), GetParam());
    EngineOptions options;
    options.prefix = prefix;
    options.scheduler = scheduler_;
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics ? *metrics : metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static GenerateRequest Request(std::vector<TokenId> prompt, int32_t max_new_tokens, uint64_t seed,
                                 std::string tenant = "") {
    GenerateRequest r;
    r.request_id = "test";
    r.tenant = std::move(tenant);
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    r.sampling.seed = seed;
    r.sampling.temperature = 0.9f;
    // The penalties make every pick depend on the seen counts, which must come back exactly.
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.frequency_penalty = 0.4f;
    r.sampling.presence_penalty = 0.2f;
    r.ignore_eos = true;
    return r;
  }

  // Prompt tokens the backend was asked to prefill since the last call.
  static int64_t PrefilledSince(const FakeBackend& fake, size_t& seen_calls) {
    const std::vector<FakeBackend::Call> calls = fake.calls();
    int64_t tokens = 0;
    for (size_t i = seen_calls; i < calls.size(); ++i) {
      if (calls[i].kind == FakeBackend::Call::kPrefill) tokens += calls[i].size;
    }
    seen_calls = calls.size();
    return tokens;
  }

  // Starts a request that keeps decoding (so Decode calls reach the backend's gate) and waits
  // for its first token. Cancel it with engine.Cancel.
  static JobId StartStream(Engine& engine, std::shared_ptr<RecordingSink>& sink) {
    sink = std::make_shared<RecordingSink>();
    absl::StatusOr<JobId> id = engine.Submit(Request(Range(240, 3), 4000, 99), sink);
    EXPECT_TRUE(id.ok()) << id.status();
    sink->WaitForTokens(1);
    return *id;
  }
  static void StopAtGate(FakeBackend& fake) {
    fake.CloseGate();
    while (!fake.WaitingAtGate()) absl::SleepFor(absl::Milliseconds(1));
  }
  // The tokens each request generates alone on an engine without prefix states.
  std::vector<std::vector<TokenId>> ColdRuns(const std::vector<GenerateRequest>& requests) {
    MetricsRegistry metrics;
    std::unique_ptr<Engine> cold = Start(Prefix(0), nullptr, &metrics);
    std::vector<std::vector<TokenId>> tokens;
    for (const GenerateRequest& r : requests) tokens.push_back(RunRequest(*cold, r).tokens);
    return tokens;
  }

  Model model_ = MakeRandomModel(TestConfig(), 3);
  MetricsRegistry metrics_;
  SchedulerLimits scheduler_;
};

// A 4-turn chat replayed statelessly: each turn resends the whole history.
struct Chat {
  std::vector<std::vector<TokenId>> generated;
  std::vector<Usage> usage;
};

Chat ReplayChat(Engine& engine, int turns) {
  Chat chat;
  std::vector<TokenId> history;
  for (int turn = 0; turn < turns; ++turn) {
    history = Concat({history, Range(10 * turn + 1, 9 + turn)});
    GenerateRequest r;
    r.request_id = "chat";
    r.prompt = history;
    r.max_new_tokens = 7 + turn;
    r.sampling.seed = 40 + turn;
    r.sampling.temperature = 0.9f;
    r.sampling.repetition_penalty = 1.3f;
    r.sampling.frequency_penalty = 0.4f;
    r.ignore_eos = true;
    const Outcome out = RunRequest(engine, r);
    EXPECT_TRUE(out.status.ok()) << out.status;
    chat.generated.push_back(out.tokens);
    chat.usage.push_back(out.result.usage);
    history = Concat({history, out.tokens});
  }
  return chat;
}

TEST_P(EnginePrefixTest, AResentConversationReadsOnlyItsNewTokensAndContinuesAsAColdRun) {
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> warm = Start(Prefix(), &fake);
  MetricsRegistry cold_metrics;
  std::unique_ptr<Engine> cold = Start(Prefix(/*budget=*/0), nullptr, &cold_metrics);
  size_t seen = 0;
  const Chat with = ReplayChat(*warm, 4);
  const Chat without = ReplayChat(*cold, 4);
  EXPECT_EQ(with.generated, without.generated);

  EXPECT_EQ(with.usage[0].cached_prompt_tokens, 0);
  for (int turn = 1; turn < 4; ++turn) {
    SCOPED_TRACE(turn);
    const Usage& u = with.usage[turn];
    // The previous turn's end left the state after its prompt and every generated token but
    // the last (sent, never fed): only that token and the new user tokens are read.
    const Usage& before = with.usage[turn - 1];
    EXPECT_EQ(u.cached_prompt_tokens, before.prompt_tokens + before.generated_tokens - 1);
    EXPECT_EQ(u.prompt_tokens - u.cached_prompt_tokens, 1 + 9 + turn);
    EXPECT_EQ(without.usage[turn].cached_prompt_tokens, 0);
    EXPECT_EQ(u.prompt_tokens, without.usage[turn].prompt_tokens);
  }
  // What the backend actually prefilled: the whole first prompt, then the new tokens only.
  int64_t expected = with.usage[0].prompt_tokens;
  for (int turn = 1; turn < 4; ++turn) {
    expected += with.usage[turn].prompt_tokens - with.usage[turn].cached_prompt_tokens;
  }
  EXPECT_EQ(PrefilledSince(*fake, seen), expected);

  const std::string text = metrics_.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("linserve_prefix_hits_total 3\n"));
  EXPECT_THAT(text, HasSubstr("linserve_prefix_misses_total{reason=\"no_prefix\"} 1\n"));
  int64_t saved = 0;
  for (const Usage& u : with.usage) saved += u.cached_prompt_tokens;
  EXPECT_THAT(text, HasSubstr(absl::StrCat("linserve_prefix_tokens_saved_total ", saved, "\n")));
  EXPECT_THAT(text, Not(HasSubstr("linserve_prefix_bytes 0\n")));
  // The turn-end checkpoints were read asynchronously (under the asynchronous loops they land
  // an engine iteration late), never with a synchronous ReadSlot on the step's path.
  EXPECT_EQ(fake->slot_reads(), 0);
  EXPECT_GE(fake->reads_started(), 4);
}

TEST_P(EnginePrefixTest, ARegeneratedPromptReusesTheStateBeforeItsLastToken) {
  std::unique_ptr<Engine> engine = Start(Prefix());
  const GenerateRequest first = Request(Range(1, 30), 5, 1);
  const Outcome a = RunRequest(*engine, first);
  GenerateRequest again = first;
  const Outcome b = RunRequest(*engine, again);
  ASSERT_TRUE(a.status.ok() && b.status.ok());
  EXPECT_EQ(a.tokens, b.tokens);                       // same seed
  EXPECT_EQ(b.result.usage.cached_prompt_tokens, 30);  // BOS + 30 tokens, all but the last
}

TEST_P(EnginePrefixTest, CheckpointsInsideALongPrefillServeADivergingRequest) {
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start(Prefix(64 << 20, /*interval=*/16), &fake);
  std::unique_ptr<Engine> cold = Start(Prefix(0));
  size_t seen = 0;
  // One long prompt, then another that shares its first 50 tokens (BOS + 49) and then differs.
  const std::vector<TokenId> long_prompt = Range(1, 200);
  ASSERT_TRUE(RunRequest(*engine, Request(long_prompt, 1, 5)).status.ok());
  PrefilledSince(*fake, seen);
  std::vector<TokenId> diverging(long_prompt.begin(), long_prompt.begin() + 49);
  diverging.push_back(249);
  diverging.insert(diverging.end(), long_prompt.begin(), long_prompt.begin() + 20);
  const Outcome out = RunRequest(*engine, Request(diverging, 12, 6));
  ASSERT_TRUE(out.status.ok());
  // The newest checkpoint at or below position 50 is at 48.
  EXPECT_EQ(out.result.usage.cached_prompt_tokens, 48);
  EXPECT_EQ(PrefilledSince(*fake, seen), out.result.usage.prompt_tokens - 48);
  EXPECT_EQ(out.tokens, RunRequest(*cold, Request(diverging, 12, 6)).tokens);
}

TEST_P(EnginePrefixTest, ConcurrentRequestsReuseTheCheckpointsOfALongPrefill) {
  // One user sends a 200-token system prompt; while it is still generating, three others send
  // the same prompt with their own question: they start from its checkpoint at 192 (a multiple
  // of 32 and below their divergence at 200).
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start(Prefix(64 << 20, /*interval=*/32), &fake);
  const std::vector<TokenId> system = Range(1, 200);
  auto first = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(Request(Concat({system, Range(210, 5)}), 40, 0), first).ok());
  first->WaitForTokens(1);  // its prompt has been read
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int user = 1; user < 4; ++user) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(
        engine->Submit(Request(Concat({system, Range(210 + user, 5)}), 3, user), sinks.back())
            .ok());
  }
  for (auto& sink : sinks) {
    const Outcome out = sink->Wait();
    ASSERT_TRUE(out.status.ok());
    EXPECT_EQ(out.result.usage.cached_prompt_tokens, 192);
  }
  ASSERT_TRUE(first->Wait().status.ok());
}

TEST_P(EnginePrefixTest, PromptsAdmittedTogetherFeedTheirSharedPrefixOnce) {
  // Four users send the same 200-token system prompt with their own question in the same
  // step, with a budget that could feed all four at once: the first feeds the prompt, the
  // others wait for its checkpoint at 192 (BOS + 200 shared tokens, a multiple of 32).
  scheduler_.prefill_token_budget = 2048;
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start(Prefix(64 << 20, /*interval=*/32), &fake);
  std::shared_ptr<RecordingSink> stream;
  const JobId stream_id = StartStream(*engine, stream);
  StopAtGate(*fake);
  const std::vector<TokenId> system = Range(1, 200);
  std::vector<GenerateRequest> requests;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int user = 0; user < 4; ++user) {
    requests.push_back(Request(Concat({system, Range(210 + user, 5)}), 3, user));
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(engine->Submit(requests.back(), sinks.back()).ok());
  }
  size_t seen = 0;
  PrefilledSince(*fake, seen);
  fake->Open();
  std::vector<Outcome> outcomes;
  for (auto& sink : sinks) outcomes.push_back(sink->Wait());
  const int64_t prefilled = PrefilledSince(*fake, seen);
  engine->Cancel(stream_id);
  stream->Wait();

  const std::vector<std::vector<TokenId>> cold = ColdRuns(requests);
  int64_t expected = 0;
  for (int user = 0; user < 4; ++user) {
    SCOPED_TRACE(user);
    ASSERT_TRUE(outcomes[user].status.ok()) << outcomes[user].status;
    const Usage& usage = outcomes[user].result.usage;
    EXPECT_EQ(usage.cached_prompt_tokens, user == 0 ? 0 : 192);
    expected += usage.prompt_tokens - usage.cached_prompt_tokens;
    EXPECT_EQ(outcomes[user].tokens, cold[user]);
  }
  EXPECT_EQ(prefilled, expected);
}

TEST_P(EnginePrefixTest, APromptWaitingForACancelledPrefillFeedsItself) {
  // The second prompt waits for the first one's checkpoints; the first is cancelled halfway
  // through its prompt, and the second then feeds the rest itself, as a cold run would.
  scheduler_.prefill_token_budget = 2048;
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start(Prefix(64 << 20, /*interval=*/32), &fake);
  std::shared_ptr<RecordingSink> stream;
  const JobId stream_id = StartStream(*engine, stream);
  StopAtGate(*fake);
  const std::vector<TokenId> document = Range(1, 2000);
  const std::vector<GenerateRequest> requests = {Request(Concat({document, Range(7, 3)}), 3, 1),
                                                 Request(Concat({document, Range(9, 3)}), 3, 2)};
  auto leader = std::make_shared<RecordingSink>();
  auto waiter = std::make_shared<RecordingSink>();
  absl::StatusOr<JobId> leader_id = engine->Submit(requests[0], leader);
  ASSERT_TRUE(leader_id.ok());
  ASSERT_TRUE(engine->Submit(requests[1], waiter).ok());
  // One step at a time until the leader has fed part of its prompt (chunks end every 32
  // tokens), then cancel it while the engine waits at the gate.
  size_t seen = 0;
  PrefilledSince(*fake, seen);
  int64_t fed = 0;
  while (fed < 320) {
    fake->Step();
    fed += PrefilledSince(*fake, seen);
  }
  engine->Cancel(*leader_id);
  fake->Open();
  const Outcome cancelled = leader->Wait();
  EXPECT_TRUE(absl::IsCancelled(cancelled.status) ||
              cancelled.result.reason == FinishReason::kCancelled)
      << cancelled.status;
  const Outcome out = waiter->Wait();
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.tokens, ColdRuns(requests)[1]);
  // It started from the last checkpoint the leader stored (BOS + 2000 shared tokens: 2000 at
  // most).
  EXPECT_GE(out.result.usage.cached_prompt_tokens, 320);
  EXPECT_LE(out.result.usage.cached_prompt_tokens, 2000);
  EXPECT_EQ(out.result.usage.cached_prompt_tokens % 32, 0);
  engine->Cancel(stream_id);
  stream->Wait();
}

TEST_P(EnginePrefixTest, CheckpointsEvictedToTheDiskTierServeAResendExactly) {
  // Memory for about one checkpoint: a second conversation's checkpoints push the first one's
  // to disk, and its resend starts from the state read back from there.
  ScopedTempDir dir;
  PrefixStoreOptions prefix = Prefix();
  prefix.memory_budget_bytes =
      static_cast<int64_t>(model_.config.StateFloatsPerSlot() * sizeof(float)) + 200 * 4 + 256;
  prefix.disk_dir = dir.Join("prefix");
  FakeBackend* fake = nullptr;
  MetricsRegistry metrics;
  std::unique_ptr<Engine> engine = Start(prefix, &fake, &metrics);
  const GenerateRequest first = Request(Range(1, 40), 6, 1);
  const Outcome a = RunRequest(*engine, first);
  ASSERT_TRUE(RunRequest(*engine, Request(Range(100, 40), 6, 2)).status.ok());
  const GenerateRequest resend = Request(Concat({first.prompt, a.tokens, Range(60, 5)}), 6, 3);
  size_t seen = 0;
  PrefilledSince(*fake, seen);
  const Outcome warm = RunRequest(*engine, resend);
  ASSERT_TRUE(warm.status.ok()) << warm.status;
  // BOS, the prompt and all but the last generated token were cached at the first request's end.
  EXPECT_EQ(warm.result.usage.cached_prompt_tokens, 1 + 40 + 5);
  EXPECT_EQ(PrefilledSince(*fake, seen),
            warm.result.usage.prompt_tokens - warm.result.usage.cached_prompt_tokens);
  EXPECT_EQ(warm.tokens, ColdRuns({resend})[0]);
  EXPECT_THAT(metrics.RenderPrometheus(), HasSubstr("linserve_prefix_disk_reads_total 1\n"));
}

TEST_P(EnginePrefixTest, ANewSessionsFirstRequestReusesAndLaterRequestsContinueTheSession) {
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start(Prefix(), &fake);
  std::unique_ptr<Engine> cold = Start(Prefix(0));
  const std::vector<TokenId> system = Range(100, 40);
  ASSERT_TRUE(RunRequest(*engine, Request(Concat({system, {7}}), 3, 1)).status.ok());

  std::vector<std::vector<TokenId>> runs;
  for (Engine* e : {engine.get(), cold.get()}) {
    absl::StatusOr<SessionInfo> session = CreateSession(*e);
    ASSERT_TRUE(session.ok());
    GenerateRequest first = Request(Concat({system, {8, 9}}), 6, 2);
    first.session_id = session->id;
    const Outcome o1 = RunRequest(*e, first);
    GenerateRequest second = Request({10, 11}, 6, 3);
    second.session_id = session->id;
    const Outcome o2 = RunRequest(*e, second);
    ASSERT_TRUE(o1.status.ok() && o2.status.ok());
    if (e == engine.get()) {
      EXPECT_EQ(o1.result.usage.cached_prompt_tokens, 41);  // BOS + the system prompt
      EXPECT_EQ(o2.result.usage.cached_prompt_tokens, 0);   // the session holds its state
      // Its turn boundaries, read asynchronously, have all landed for a session operation.
      const absl::StatusOr<SessionInfo> info = GetSession(*e, session->id);
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->boundaries.size(), 3u);  // 0 and each turn's end
    }
    runs.push_back(Concat({o1.tokens, o2.tokens}));
  }
  EXPECT_EQ(runs[0], runs[1]);
  // No synchronous read on the step's path.
  EXPECT_EQ(fake->slot_reads(), 0);
  EXPECT_GE(fake->reads_started(), 3);
}

TEST_P(EnginePrefixTest, AnotherTenantsIdenticalPromptMisses) {
  std::unique_ptr<Engine> engine = Start(Prefix());
  const std::vector<TokenId> prompt = Range(1, 30);
  ASSERT_TRUE(RunRequest(*engine, Request(prompt, 4, 1, "tenant-a")).status.ok());
  const Outcome b = RunRequest(*engine, Request(prompt, 4, 1, "tenant-b"));
  ASSERT_TRUE(b.status.ok());
  EXPECT_EQ(b.result.usage.cached_prompt_tokens, 0);
  const Outcome a = RunRequest(*engine, Request(prompt, 4, 1, "tenant-a"));
  EXPECT_EQ(a.result.usage.cached_prompt_tokens, 30);
  EXPECT_EQ(a.tokens, b.tokens);
}

TEST_P(EnginePrefixTest, MissesSayWhy) {
  // Room for about one checkpoint of the tiny model's state (~1.1 KB of floats) at a time.
  const int64_t state_bytes = model_.config.StateFloatsPerSlot() * 4;
  std::unique_ptr<Engine> engine = Start(Prefix(state_bytes + 600));
  ASSERT_TRUE(RunRequest(*engine, Request({1, 2}, 2, 1)).status.ok());  // too short
  const std::vector<TokenId> a = Range(1, 30), b = Range(60, 30);
  ASSERT_TRUE(RunRequest(*engine, Request(a, 1, 1)).status.ok());  // no prefix
  ASSERT_TRUE(RunRequest(*engine, Request(b, 1, 1)).status.ok());  // no prefix; evicts a's
  const Outcome again = RunRequest(*engine, Request(a, 1, 1));     // evicted
  ASSERT_TRUE(again.status.ok());
  EXPECT_EQ(again.result.usage.cached_prompt_tokens, 0);
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_THAT(text, HasSubstr("linserve_prefix_misses_total{reason=\"too_short\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("linserve_prefix_misses_total{reason=\"no_prefix\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("linserve_prefix_misses_total{reason=\"evicted\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("linserve_prefix_hits_total 0\n"));
  EXPECT_THAT(text, Not(HasSubstr("linserve_prefix_evictions_total 0\n")));
}

TEST_P(EnginePrefixTest, InvalidOptionsAreRejected) {
  EngineOptions options;
  options.prefix.memory_budget_bytes = -1;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(model_, std::make_unique<FakeBackend>(model_.config, 2), options, metrics_);
  ASSERT_FALSE(engine.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(engine.status()));
  EXPECT_THAT(engine.status().message(), HasSubstr("memory budget"));
}

INSTANTIATE_TEST_SUITE_P(Loops, EnginePrefixTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

// On the CPU backend (the source of truth), a warm start changes where chunks begin, so logits
// may differ by float rounding only: greedy tokens are equal and logprobs agree within the
// tolerance of chunked against token-by-token prefill.
TEST(EnginePrefixCpuTest, AWarmStartMatchesAColdRunOnTheCpuBackend) {
  const Model model = MakeRandomModel(TestConfig(), 11);
  MetricsRegistry metrics;
  auto start = [&](int64_t budget) {
    EngineOptions options;
    options.prefix = Prefix(budget, /*interval=*/32);
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateCpuBackend(model, {.max_slots = 4, .prefill_chunk_size = 16, .num_threads = 1});
    EXPECT_TRUE(backend.ok()) << backend.status();
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model, *std::move(backend), options, metrics);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return *std::move(engine);
  };
  std::unique_ptr<Engine> warm = start(64 << 20);
  std::unique_ptr<Engine> cold = start(0);
  auto greedy = [](std::vector<TokenId> prompt) {
    GenerateRequest r;
    r.request_id = "cpu";
    r.prompt = std::move(prompt);
    r.max_new_tokens = 16;
    r.sampling.temperature = 0;
    r.top_logprobs = 3;
    r.ignore_eos = true;
    return r;
  };
  const std::vector<TokenId> first = Range(3, 90);
  const Outcome t1 = RunRequest(*warm, greedy(first));
  ASSERT_TRUE(t1.status.ok());
  const std::vector<TokenId> second = Concat({first, t1.tokens, Range(40, 11)});
  const Outcome hot = RunRequest(*warm, greedy(second));
  const Outcome ref = RunRequest(*cold, greedy(second));
  ASSERT_TRUE(hot.status.ok() && ref.status.ok());
  EXPECT_GT(hot.result.usage.cached_prompt_tokens, 90);
  EXPECT_EQ(hot.tokens, ref.tokens);
  ASSERT_EQ(hot.details.size(), ref.details.size());
  for (size_t i = 0; i < hot.details.size(); ++i) {
    EXPECT_NEAR(hot.details[i].logprob, ref.details[i].logprob, 1e-4) << i;
    ASSERT_EQ(hot.details[i].top_logprobs.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(hot.details[i].top_logprobs[k].token, ref.details[i].top_logprobs[k].token);
      EXPECT_NEAR(hot.details[i].top_logprobs[k].logprob, ref.details[i].top_logprobs[k].logprob,
                  1e-4);
    }
  }
}

}  // namespace
}  // namespace linserve
