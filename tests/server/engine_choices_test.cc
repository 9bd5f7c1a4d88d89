// Requests of n choices in the engine (GenerateRequest::n), over the FakeBackend in every engine
// loop: the prompt is prefilled once and forked before its last token, choice i generates what
// a request of one choice with seed + i does, the choices decode in the same batches, each sink
// hears its own choice; a request that cannot fit is refused, one that must wait for slots makes
// the requests behind it wait too; a session continues with the choice named; cancelling or a
// leader that fails ends every choice.
#include <atomic>
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

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr TokenId kBos = 256;

ModelConfig TestConfig() {
  ModelConfig config = TinyConfig();
  config.bos_token_id = kBos;
  return config;
}

std::vector<TokenId> Prompt(int n) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<TokenId>((i * 37 + 11) % 250));
  return out;
}

// Records the order of first tokens and ends across sinks (a shared counter).
class OrderedSink : public RecordingSink {
 public:
  explicit OrderedSink(std::atomic<int>* clock) : clock_(clock) {}
  void OnToken(const GeneratedToken& token, std::string_view text) override {
    if (first_token_ < 0) first_token_ = clock_->fetch_add(1);
    RecordingSink::OnToken(token, text);
  }
  void OnFinish(const absl::Status& status, const GenerationResult& result) override {
    finish_ = clock_->fetch_add(1);
    RecordingSink::OnFinish(status, result);
  }
  // Read after Wait().
  int first_token() const { return first_token_; }
  int finish() const { return finish_; }

 private:
  std::atomic<int>* const clock_;
  std::atomic<int> first_token_{-1};
  std::atomic<int> finish_{-1};
};

class EngineChoicesTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  std::unique_ptr<Engine> Start(EngineOptions options = {}, int32_t slots = 8,
                                FakeBackend** fake_out = nullptr) {
    auto fake = std::make_unique<FakeBackend>(model_.config, slots);
    if (fake_out != nullptr) *fake_out = fake.get();
    std::unique_ptr<Backend> backend = BackendForLoop(std::move(fake), GetParam());
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static GenerateRequest Request(int32_t n, int32_t max_new_tokens, uint64_t seed) {
    GenerateRequest r;
    r.request_id = "choices";
    r.prompt = Prompt(20);
    r.n = n;
    r.max_new_tokens = max_new_tokens;
    r.sampling.seed = seed;
    r.sampling.temperature = 0.9f;
    r.sampling.presence_penalty = 0.3f;  // the forked seen counts matter
    r.ignore_eos = true;
    return r;
  }

  // Submits `request` with a RecordingSink per choice and waits for every one.
  static std::vector<Outcome> RunChoices(Engine& engine, GenerateRequest request) {
    std::vector<std::shared_ptr<RecordingSink>> sinks;
    std::vector<std::shared_ptr<TokenSink>> as_sinks;
    for (int32_t i = 0; i < request.n; ++i) {
      sinks.push_back(std::make_shared<RecordingSink>());
      as_sinks.push_back(sinks.back());
    }
    absl::StatusOr<std::vector<JobId>> ids = engine.Submit(std::move(request), as_sinks);
    std::vector<Outcome> out;
    for (auto& sink : sinks) {
      if (!ids.ok()) {
        Outcome refused;
        refused.status = ids.status();
        out.push_back(std::move(refused));
      } else {
        out.push_back(sink->Wait());
      }
    }
    return out;
  }

  static int64_t PrefilledTokens(const FakeBackend& fake) {
    int64_t tokens = 0;
    for (const FakeBackend::Call& call : fake.calls()) {
      if (call.kind == FakeBackend::Call::kPrefill) tokens += call.size;
    }
    return tokens;
  }

  Model model_ = MakeRandomModel(TestConfig(), 5);
  MetricsRegistry metrics_;
};

INSTANTIATE_TEST_SUITE_P(Loops, EngineChoicesTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

TEST_P(EngineChoicesTest, EachChoiceIsTheOneChoiceRequestWithSeedPlusIndex) {
  FakeBackend* fake = nullptr;
  std::unique_ptr<Engine> engine = Start({}, 8, &fake);
  const std::vector<Outcome> choices = RunChoices(*engine, Request(4, 10, 100));
  // The prompt (BOS + 20 tokens) was fed once to its last token, then once per choice.
  EXPECT_EQ(PrefilledTokens(*fake), 20 + 4);
  int32_t widest_decode = 0;
  for (const FakeBackend::Call& call : fake->calls()) {
    if (call.kind == FakeBackend::Call::kDecode) widest_decode = std::max(widest_decode, call.size);
  }
  EXPECT_EQ(widest_decode, 4);  // decoded together

  EngineOptions no_prefix;
  no_prefix.prefix.memory_budget_bytes = 0;
  std::unique_ptr<Engine> alone = Start(no_prefix);
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(choices[i].status.ok()) << choices[i].status;
    EXPECT_EQ(choices[i].tokens.size(), 10u);
    EXPECT_EQ(choices[i].result.usage.seed, 100u + i);
    EXPECT_EQ(choices[i].result.usage.prompt_tokens, 21);
    const Outcome single = RunRequest(*alone, Request(1, 10, 100 + i));
    ASSERT_TRUE(single.status.ok()) << single.status;
    EXPECT_EQ(choices[i].tokens, single.tokens);
    EXPECT_EQ(choices[i].text, single.text);
  }
  EXPECT_NE(choices[0].tokens, choices[1].tokens);
}

TEST_P(EngineChoicesTest, ARequestThatCannotFitIsRefused) {
  EngineOptions options;
  options.tenant_max_queued = 3;
  std::unique_ptr<Engine> engine = Start(options, 8);
  auto refused = [&](GenerateRequest r, const std::string& what) {
    const std::vector<Outcome> out = RunChoices(*engine, std::move(r));
    EXPECT_EQ(out[0].status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(std::string(out[0].status.message()), HasSubstr(what));
  };
  refused(Request(4, 5, 1), "tenant_max_queued");
  refused(Request(17, 5, 1), "n: must be in [1, 16]");
  GenerateRequest zero = Request(2, 0, 1);
  refused(zero, "max_new_tokens >= 1");
  GenerateRequest scored = Request(2, 5, 1);
  scored.prompt_logprobs = 0;
  refused(scored, "prompt_logprobs");
  // One sink for two choices.
  const absl::StatusOr<std::vector<JobId>> mismatched =
      engine->Submit(Request(2, 5, 1), std::vector<std::shared_ptr<TokenSink>>{
                                           std::make_shared<RecordingSink>()});
  EXPECT_EQ(mismatched.status().code(), absl::StatusCode::kInvalidArgument);

  std::unique_ptr<Engine> small = Start({}, 2);
  const std::vector<Outcome> out = RunChoices(*small, Request(3, 5, 1));
  EXPECT_THAT(std::string(out[0].status.message()), HasSubstr("2 state slots"));
  EXPECT_TRUE(RunChoices(*small, Request(2, 5, 1))[1].status.ok());
}

// With a session, n > 1 needs session_choice; the session then continues exactly as after a
// one-choice request with that choice's seed.
TEST_P(EngineChoicesTest, ASessionContinuesWithTheChoiceItNames) {
  std::unique_ptr<Engine> engine = Start();
  absl::StatusOr<SessionInfo> session = CreateSession(*engine);
  ASSERT_TRUE(session.ok()) << session.status();
  GenerateRequest r = Request(3, 6, 40);
  r.session_id = session->id;
  EXPECT_THAT(std::string(RunChoices(*engine, r)[0].status.message()),
              HasSubstr("needs session_choice"));
  r.session_choice = 3;
  EXPECT_THAT(std::string(RunChoices(*engine, r)[0].status.message()),
              HasSubstr("session_choice: must be in [0, n)"));
  r.session_choice = 1;
  const std::vector<Outcome> choices = RunChoices(*engine, r);
  for (const Outcome& c : choices) ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(choices[1].result.usage.session_tokens, 21 + 6);
  GenerateRequest next = Request(1, 8, 7);
  next.prompt = {5, 6, 7};
  next.session_id = session->id;
  const Outcome continued = RunRequest(*engine, next);
  ASSERT_TRUE(continued.status.ok()) << continued.status;

  // The same two turns with one choice of seed 41.
  absl::StatusOr<SessionInfo> other = CreateSession(*engine);
  ASSERT_TRUE(other.ok()) << other.status();
  GenerateRequest first = Request(1, 6, 41);
  first.session_id = other->id;
  const Outcome single = RunRequest(*engine, first);
  EXPECT_EQ(single.tokens, choices[1].tokens);
  next.session_id = other->id;
  EXPECT_EQ(RunRequest(*engine, next).tokens, continued.tokens);
  EXPECT_EQ(GetSession(*engine, session->id)->num_tokens,
            GetSession(*engine, other->id)->num_tokens);
}

// Cancelling every choice ends each with CANCELLED and frees their slots: a request of as many
// choices as slots then runs.
TEST_P(EngineChoicesTest, CancellingEndsEveryChoiceAndFreesTheirSlots) {
  std::unique_ptr<Engine> engine = Start({}, 4);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::shared_ptr<TokenSink>> as_sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    as_sinks.push_back(sinks.back());
  }
  absl::StatusOr<std::vector<JobId>> ids = engine->Submit(Request(3, 4000, 3), as_sinks);
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (auto& sink : sinks) sink->WaitForTokens(2);
  for (JobId id : *ids) engine->Cancel(id);
  for (auto& sink : sinks) {
    EXPECT_EQ(sink->Wait().status.code(), absl::StatusCode::kCancelled);
  }
  const std::vector<Outcome> all = RunChoices(*engine, Request(4, 3, 9));
  for (const Outcome& c : all) EXPECT_TRUE(c.status.ok()) << c.status;
}

// A leader that fails before its fork (an unknown session) fails every choice.
TEST_P(EngineChoicesTest, ALeaderThatFailsBeforeItsForkFailsEveryChoice) {
  std::unique_ptr<Engine> engine = Start();
  GenerateRequest r = Request(3, 5, 1);
  r.session_id = SessionId{std::string(32, 'c')};
  r.session_choice = 2;
  for (const Outcome& c : RunChoices(*engine, r)) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kNotFound) << c.status;
  }
}

// Four slots, one held by a streaming request: a request of 4 choices waits for all four, and a
// request submitted after it waits behind it (it would fit in a free slot at once otherwise).
// The sinks run on the engine thread (no emitter threads), so their order is the engine's.
TEST_P(EngineChoicesTest, AGroupWaitsForAllItsSlotsAndTheRequestsBehindItWaitToo) {
  EngineOptions options;
  options.emitter_threads = 0;
  std::unique_ptr<Engine> engine = Start(options, 4);
  std::atomic<int> clock{0};
  auto streaming = std::make_shared<OrderedSink>(&clock);
  GenerateRequest long_one = Request(1, 4000, 1);
  absl::StatusOr<JobId> holder = engine->Submit(long_one, streaming);
  ASSERT_TRUE(holder.ok()) << holder.status();
  streaming->WaitForTokens(1);

  std::vector<std::shared_ptr<OrderedSink>> group;
  std::vector<std::shared_ptr<TokenSink>> as_sinks;
  for (int i = 0; i < 4; ++i) {
    group.push_back(std::make_shared<OrderedSink>(&clock));
    as_sinks.push_back(group.back());
  }
  ASSERT_TRUE(engine->Submit(Request(4, 3, 2), as_sinks).ok());
  auto behind = std::make_shared<OrderedSink>(&clock);
  ASSERT_TRUE(engine->Submit(Request(1, 3, 3), behind).ok());
  // Let the engine run a while: neither may start while the long request holds its slot.
  streaming->WaitForTokens(200);
  EXPECT_EQ(behind->token_count(), 0u);
  for (auto& sink : group) EXPECT_EQ(sink->token_count(), 0u);
  engine->Cancel(*holder);
  EXPECT_EQ(streaming->Wait().status.code(), absl::StatusCode::kCancelled);
  int first_group_end = 1 << 30;
  for (auto& sink : group) {
    ASSERT_TRUE(sink->Wait().status.ok());
    EXPECT_GT(sink->first_token(), streaming->finish());
    first_group_end = std::min(first_group_end, sink->finish());
  }
  ASSERT_TRUE(behind->Wait().status.ok());
  EXPECT_GT(behind->first_token(), first_group_end);  // the group had every slot
}

// A request on a session already in a slot, queued behind a group that waits, is admitted (its
// busy session pins that slot, which the group needs once the request has run): both finish.
TEST_P(EngineChoicesTest, ARequestWhoseSessionHoldsASlotRunsPastAWaitingGroup) {
  std::unique_ptr<Engine> engine = Start({}, 4);
  absl::StatusOr<SessionInfo> session = CreateSession(*engine);
  ASSERT_TRUE(session.ok()) << session.status();
  GenerateRequest on_session = Request(1, 2, 5);
  on_session.session_id = session->id;
  ASSERT_TRUE(RunRequest(*engine, on_session).status.ok());  // resident, idle
  auto streaming = std::make_shared<RecordingSink>();
  absl::StatusOr<JobId> holder = engine->Submit(Request(1, 4000, 1), streaming);
  ASSERT_TRUE(holder.ok()) << holder.status();
  streaming->WaitForTokens(1);
  std::vector<std::shared_ptr<RecordingSink>> group;
  std::vector<std::shared_ptr<TokenSink>> as_sinks;
  for (int i = 0; i < 4; ++i) {
    group.push_back(std::make_shared<RecordingSink>());
    as_sinks.push_back(group.back());
  }
  ASSERT_TRUE(engine->Submit(Request(4, 3, 2), as_sinks).ok());
  auto behind = std::make_shared<RecordingSink>();
  ASSERT_TRUE(engine->Submit(on_session, behind).ok());
  engine->Cancel(*holder);
  ASSERT_TRUE(behind->WaitFor(absl::Seconds(60)));
  EXPECT_TRUE(behind->Wait().status.ok());
  for (auto& sink : group) {
    ASSERT_TRUE(sink->WaitFor(absl::Seconds(60)));
    EXPECT_TRUE(sink->Wait().status.ok());
  }
}

// Shutting down while a leader still feeds the prompt (its choices wait for the fork) ends every
// choice, cancelled.
TEST_P(EngineChoicesTest, ShutdownWithForksPendingEndsEveryChoice) {
  EngineOptions options;
  options.scheduler.prefill_token_budget = 8;
  options.scheduler.idle_prefill_token_budget = 8;
  std::unique_ptr<Engine> engine = Start(options);
  GenerateRequest r = Request(3, 4, 1);
  r.prompt = Prompt(20000);  // 2,500 steps of 8 tokens
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<std::shared_ptr<TokenSink>> as_sinks;
  for (int i = 0; i < 3; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    as_sinks.push_back(sinks.back());
  }
  ASSERT_TRUE(engine->Submit(r, as_sinks).ok());
  // All three are active (the followers waiting for the fork) before the engine stops.
  while (engine->stats().active_requests < 3) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(engine->Shutdown(absl::ZeroDuration()).ok());
  for (auto& sink : sinks) {
    const Outcome out = sink->Wait();
    EXPECT_TRUE(out.status.ok()) << out.status;
    EXPECT_EQ(out.result.reason, FinishReason::kCancelled);
  }
}

}  // namespace
}  // namespace linserve
