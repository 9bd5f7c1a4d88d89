// Prompt logprobs in the engine (GenerateRequest::prompt_logprobs), on a tiny random model and
// the CPU backend, in every engine loop: every prompt token's logprob and alternatives come
// from the chunked prefill's logits and equal, within kPromptLogprobBound, what token-by-token
// decoding gives; they reach the sink before any generated token; max_new_tokens 0 scores a
// prompt and generates nothing; a cached prefix never skips the scored positions; a session's
// later request scores its first token only when a token before it is fed with it.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/cpu/cpu_backend.h"
#include "server/engine/engine.h"
#include "tests/testing/pipelined_backend.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

constexpr TokenId kBos = 256;
// |chunked prefill's logprob - token-by-token decoding's| on this model, fp32 state: the largest
// difference over these prompts is 9.5e-7, one float ulp at their magnitude.
constexpr double kPromptLogprobBound = 1e-4;

ModelConfig TestConfig() {
  ModelConfig config = TinyConfig();
  config.bos_token_id = kBos;
  config.tie_embeddings = false;
  return config;
}

std::vector<TokenId> Prompt(int n, int seed) {
  std::vector<TokenId> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<TokenId>((seed * 31 + i * 17 + i * i) % 250));
  return out;
}

// log p(tokens[i] | BOS, tokens[0, i)) for every i, decoding one token at a time, and the top
// `n` alternatives at each position.
struct Decoded {
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
};
Decoded DecodeOneByOne(const Model& model, const std::vector<TokenId>& tokens, int32_t n) {
  absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(model, BackendOptions());
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  const SlotId slot = *(*cpu)->AllocateSlot();
  Decoded out;
  std::vector<float> logits(static_cast<size_t>(model.config.vocab_size));
  TokenId previous = kBos;
  for (TokenId t : tokens) {
    const DecodeItem item{slot, previous};
    EXPECT_TRUE((*cpu)->Decode({&item, 1}, absl::MakeSpan(logits)).ok());
    out.logprobs.push_back(LogProbOf(logits, t));
    out.top.push_back(TopLogprobs(logits, n));
    previous = t;
  }
  return out;
}

class EnginePromptLogprobsTest : public ::testing::TestWithParam<EngineLoop> {
 protected:
  std::unique_ptr<Engine> Start(EngineOptions options = {}) {
    BackendOptions backend_options;
    backend_options.max_slots = 8;
    backend_options.num_threads = 1;
    backend_options.prefill_chunk_size = 16;
    absl::StatusOr<std::unique_ptr<CpuBackend>> cpu = CpuBackend::Create(model_, backend_options);
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    if (!cpu.ok()) return nullptr;
    std::unique_ptr<Backend> backend = *std::move(cpu);
    backend = BackendForLoop(std::move(backend), GetParam());
    // Small passes: a long prompt is scored over several steps.
    options.scheduler.idle_prefill_token_budget = 40;
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(model_, std::move(backend), options, metrics_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  static GenerateRequest Scored(std::vector<TokenId> prompt, int32_t max_new_tokens,
                                int32_t alternatives) {
    GenerateRequest r;
    r.request_id = "scored";
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new_tokens;
    r.prompt_logprobs = alternatives;
    r.sampling.temperature = 0.0f;
    r.top_logprobs = 1;
    r.ignore_eos = true;
    return r;
  }

  // The outcome's prompt tokens against one-by-one decoding of `prompt` after BOS.
  void ExpectScoredLikeDecoding(const Outcome& outcome, const std::vector<TokenId>& prompt,
                                int32_t alternatives) {
    ASSERT_EQ(outcome.prompt_tokens.size(), prompt.size());
    EXPECT_FALSE(outcome.prompt_after_tokens);
    const Decoded decoded = DecodeOneByOne(model_, prompt, alternatives);
    std::string text;
    for (size_t i = 0; i < prompt.size(); ++i) {
      SCOPED_TRACE(i);
      const PromptToken& t = outcome.prompt_tokens[i];
      EXPECT_EQ(t.id, prompt[i]);
      ASSERT_TRUE(t.logprob.has_value());
      EXPECT_NEAR(*t.logprob, decoded.logprobs[i], kPromptLogprobBound);
      ASSERT_EQ(t.top_logprobs.size(), static_cast<size_t>(alternatives));
      for (int32_t k = 0; k < alternatives; ++k) {
        EXPECT_NEAR(t.top_logprobs[k].logprob, decoded.top[i][k].logprob, kPromptLogprobBound);
      }
      text += t.text;
    }
    // The prompt's text as the detokenizer gives it (bytes that are no UTF-8 become U+FFFD).
    StreamingDetokenizer detokenizer(*model_.tokenizer);
    std::string expected;
    for (TokenId t : prompt) expected += detokenizer.Push(t);
    expected += detokenizer.Flush();
    EXPECT_EQ(text, expected);
  }

  Model model_ = MakeRandomModel(TestConfig(), 41);
  MetricsRegistry metrics_;
};

INSTANTIATE_TEST_SUITE_P(Loops, EnginePromptLogprobsTest, ::testing::ValuesIn(kEngineLoops),
                         [](const auto& info) { return EngineLoopName(info.param); });

// max_new_tokens 0: a 300-token prompt scored over several passes, nothing generated.
TEST_P(EnginePromptLogprobsTest, ScoresEveryPromptTokenAsTokenByTokenDecodingDoes) {
  std::unique_ptr<Engine> engine = Start();
  const std::vector<TokenId> prompt = Prompt(300, 1);
  const Outcome outcome = RunRequest(*engine, Scored(prompt, 0, 3));
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_TRUE(outcome.tokens.empty());
  EXPECT_EQ(outcome.result.reason, FinishReason::kLength);
  EXPECT_EQ(outcome.result.usage.generated_tokens, 0);
  EXPECT_EQ(outcome.result.usage.prompt_tokens, 301);
  ExpectScoredLikeDecoding(outcome, prompt, 3);
}

// With generation: the prompt is scored first, then the tokens come; the first one's logprob
// (the sampling prefill's) is decoding's too.
TEST_P(EnginePromptLogprobsTest, ScoredPromptThenGeneratedTokens) {
  std::unique_ptr<Engine> engine = Start();
  for (int length : {1, 2, 57}) {
    SCOPED_TRACE(length);
    const std::vector<TokenId> prompt = Prompt(length, length);
    const Outcome outcome = RunRequest(*engine, Scored(prompt, 4, 2));
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    ASSERT_EQ(outcome.tokens.size(), 4u);
    ExpectScoredLikeDecoding(outcome, prompt, 2);
    std::vector<TokenId> whole = prompt;
    whole.push_back(outcome.tokens[0]);
    EXPECT_NEAR(outcome.details[0].logprob, DecodeOneByOne(model_, whole, 1).logprobs.back(),
                kPromptLogprobBound);
  }
}

// A prefix state cached by an earlier request is not used: the second run scores every token
// again (no cached prompt tokens) and gives the same logprobs.
TEST_P(EnginePromptLogprobsTest, ACachedPrefixNeverSkipsScoredPositions) {
  EngineOptions options;
  options.prefix = {.memory_budget_bytes = 64 << 20, .checkpoint_interval = 8, .min_tokens = 4};
  std::unique_ptr<Engine> engine = Start(options);
  const std::vector<TokenId> prompt = Prompt(80, 3);
  GenerateRequest plain = Scored(prompt, 2, 0);
  plain.prompt_logprobs = -1;
  ASSERT_TRUE(RunRequest(*engine, plain).status.ok());
  ASSERT_GT(RunRequest(*engine, plain).result.usage.cached_prompt_tokens, 0);
  const Outcome scored = RunRequest(*engine, Scored(prompt, 2, 0));
  ASSERT_TRUE(scored.status.ok()) << scored.status;
  EXPECT_EQ(scored.result.usage.cached_prompt_tokens, 0);
  ExpectScoredLikeDecoding(scored, prompt, 0);
}

// A session's later request whose session has nothing pending (the first turn generated
// nothing): its first prompt token has nothing before it in the request (no logprob); the
// others are scored given the whole session.
TEST_P(EnginePromptLogprobsTest, ASessionsLaterRequestScoresAllButItsFirstToken) {
  std::unique_ptr<Engine> engine = Start();
  absl::StatusOr<SessionInfo> session = CreateSession(*engine);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<TokenId> first = Prompt(20, 4);
  GenerateRequest turn = Scored(first, 0, 1);
  turn.session_id = session->id;
  ASSERT_TRUE(RunRequest(*engine, turn).status.ok());
  const std::vector<TokenId> second = Prompt(12, 5);
  turn.prompt = second;
  const Outcome outcome = RunRequest(*engine, turn);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  ASSERT_EQ(outcome.prompt_tokens.size(), second.size());
  EXPECT_FALSE(outcome.prompt_tokens[0].logprob.has_value());
  EXPECT_TRUE(outcome.prompt_tokens[0].top_logprobs.empty());
  std::vector<TokenId> whole = first;
  whole.insert(whole.end(), second.begin(), second.end());
  const Decoded decoded = DecodeOneByOne(model_, whole, 1);
  for (size_t i = 1; i < second.size(); ++i) {
    ASSERT_TRUE(outcome.prompt_tokens[i].logprob.has_value());
    EXPECT_NEAR(*outcome.prompt_tokens[i].logprob, decoded.logprobs[first.size() + i],
                kPromptLogprobBound);
  }
  EXPECT_EQ(outcome.result.usage.session_tokens, 1 + 20 + 12);
}

// A session's later request after one that generated (ending by length, its last token not
// consumed): that token is fed first, so every prompt token is scored, given the whole session.
TEST_P(EnginePromptLogprobsTest, AfterAGeneratingTurnEveryPromptTokenIsScored) {
  std::unique_ptr<Engine> engine = Start();
  absl::StatusOr<SessionInfo> session = CreateSession(*engine);
  ASSERT_TRUE(session.ok()) << session.status();
  const std::vector<TokenId> first = Prompt(20, 6);
  GenerateRequest turn = Scored(first, 3, 1);
  turn.prompt_logprobs = -1;
  turn.session_id = session->id;
  const Outcome generated = RunRequest(*engine, turn);
  ASSERT_TRUE(generated.status.ok()) << generated.status;
  ASSERT_EQ(generated.tokens.size(), 3u);
  const std::vector<TokenId> second = Prompt(9, 7);
  turn = Scored(second, 0, 1);
  turn.session_id = session->id;
  const Outcome outcome = RunRequest(*engine, turn);
  ASSERT_TRUE(outcome.status.ok()) << outcome.status;
  ASSERT_EQ(outcome.prompt_tokens.size(), second.size());
  std::vector<TokenId> whole = first;
  whole.insert(whole.end(), generated.tokens.begin(), generated.tokens.end());
  whole.insert(whole.end(), second.begin(), second.end());
  const Decoded decoded = DecodeOneByOne(model_, whole, 1);
  for (size_t i = 0; i < second.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_TRUE(outcome.prompt_tokens[i].logprob.has_value());
    EXPECT_NEAR(*outcome.prompt_tokens[i].logprob, decoded.logprobs[first.size() + 3 + i],
                kPromptLogprobBound);
  }
}

}  // namespace
}  // namespace linserve
