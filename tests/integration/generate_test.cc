// Generate through the real stack: streaming, determinism under concurrency, session
// continuation, cancellation, deadlines, capacity limits, constraints.
#include <algorithm>
#include <atomic>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_server.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

bool IsValidUtf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = text[i];
    int extra = 0;
    if (c >= 0x80) {
      if ((c >> 5) == 0x6) {
        extra = 1;
      } else if ((c >> 4) == 0xE) {
        extra = 2;
      } else if ((c >> 3) == 0x1E) {
        extra = 3;
      } else {
        return false;
      }
    }
    if (i + extra >= text.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) return false;
    }
    i += extra + 1;
  }
  return true;
}

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Every message of a Generate call, which must succeed.
std::vector<v1::GenerateResponse> Messages(Client& client, const v1::GenerateRequest& request) {
  std::vector<v1::GenerateResponse> messages;
  const absl::Status status = client.Generate(request, [&](const v1::GenerateResponse& m) {
    messages.push_back(m);
    return true;
  });
  EXPECT_TRUE(status.ok()) << status;
  return messages;
}

class GenerateTest : public ::testing::Test {
 protected:
  static TestServerOptions Options() {
    TestServerOptions o;
    o.backend.max_slots = 256;
    o.backend.num_threads = 1;
    // One-token attention chunks: the CPU's prefill is then bitwise its decode steps
    // (kernels/cpu/linear_attention.h), so paths that feed the same tokens in different pieces
    // (turns, forks, choices, a whole history) compare exactly, not up to rounding that a
    // sampled draw can turn into another token.
    o.backend.prefill_chunk_size = 1;
    o.engine.requests.max_new_tokens = 100000;
    return o;
  }
  Model model_ = MakeRandomModel(TinyConfig(), 42);
};

TEST_F(GenerateTest, StreamsTokensThenALastMessageWithFinishReasonAndUsage) {
  TestServer server(model_, Options());
  v1::GenerateRequest request;
  request.set_text("Hello, linear attention!");
  request.set_max_new_tokens(32);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_seed(5);
  std::vector<v1::GenerateResponse> messages;
  const absl::Status status = server.client().Generate(
      request, [&](const v1::GenerateResponse& m) {
        messages.push_back(m);
        return true;
      },
      {.timeout = absl::Seconds(30), .request_id = "req-streams"});
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_GE(messages.size(), 2u);
  int tokens = 0;
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    EXPECT_GE(messages[i].tokens_size(), 1);
    EXPECT_EQ(messages[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_FALSE(messages[i].has_usage());
    EXPECT_TRUE(IsValidUtf8(messages[i].text()));
    tokens += messages[i].tokens_size();
  }
  const v1::GenerateResponse& last = messages.back();
  tokens += last.tokens_size();
  EXPECT_EQ(tokens, 32);
  EXPECT_EQ(last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.request_id(), "req-streams");
  EXPECT_EQ(last.usage().generated_tokens(), 32);
  EXPECT_EQ(last.usage().prompt_tokens(),
            static_cast<int32_t>(server.client().Tokenize("Hello, linear attention!")->size()));
  EXPECT_EQ(last.usage().seed(), 5u);
  EXPECT_GT(last.usage().time_to_first_token_us(), 0);
  EXPECT_GE(last.usage().total_time_us(), last.usage().time_to_first_token_us());
}

TEST_F(GenerateTest, UnsetSeedIsDrawnAndReported) {
  TestServer server(model_, Options());
  v1::GenerateRequest request = TokensRequest({1, 2, 3}, 12, 0);
  request.mutable_sampling()->clear_seed();
  const Streamed first = RunGenerate(server.client(), request);
  const Streamed second = RunGenerate(server.client(), request);
  ASSERT_TRUE(first.status.ok() && second.status.ok());
  EXPECT_NE(first.last.usage().seed(), second.last.usage().seed());
  // The reported seed reproduces the generation.
  const Streamed replay =
      RunGenerate(server.client(), TokensRequest({1, 2, 3}, 12, first.last.usage().seed()));
  EXPECT_EQ(replay.tokens, first.tokens);
}

TEST_F(GenerateTest, SameSeedSameTokensAloneAndInside64ConcurrentSessions) {
  TestServer server(model_, Options());
  const v1::GenerateRequest probe = TokensRequest({10, 20, 30, 40, 50}, 48, 1234);
  const Streamed alone = RunGenerate(server.client(), probe);
  ASSERT_TRUE(alone.status.ok()) << alone.status;
  ASSERT_EQ(alone.tokens.size(), 48u);

  // 64 sessions generating at once; every 8th runs the probe.
  struct Run {
    absl::Mutex mu;
    std::vector<int32_t> tokens;
  };
  std::vector<std::unique_ptr<Run>> runs;
  std::vector<std::unique_ptr<GenerateStream>> streams;
  for (int i = 0; i < 64; ++i) {
    absl::StatusOr<v1::Session> session = server.client().CreateSession();
    ASSERT_TRUE(session.ok());
    v1::GenerateRequest request =
        i % 8 == 0 ? probe
                   : TokensRequest({i, i + 1, 7}, 20 + i, static_cast<uint64_t>(i) * 31);
    request.set_session_id(session->id());
    runs.push_back(std::make_unique<Run>());
    Run* run = runs.back().get();
    streams.push_back(server.client().StartGenerate(request, [run](const v1::GenerateResponse& m) {
      absl::MutexLock lock(&run->mu);
      for (const v1::GeneratedToken& t : m.tokens()) run->tokens.push_back(t.id());
    }));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    ASSERT_TRUE(streams[i]->Wait().ok()) << i;
  }
  for (int i = 0; i < 64; i += 8) {
    absl::MutexLock lock(&runs[i]->mu);
    EXPECT_EQ(runs[i]->tokens, alone.tokens) << "session " << i;
  }
}

TEST_F(GenerateTest, SessionContinuedOverTwoRequestsEqualsOneRequestWithTheConcatenatedPrompt) {
  TestServer server(model_, Options());
  const std::string id = server.client().CreateSession()->id();
  const std::vector<int32_t> p1 = {72, 101, 108, 108, 111}, p2 = {32, 119};
  v1::GenerateRequest first = TokensRequest(p1, 16, 1, id);
  first.mutable_sampling()->set_repetition_penalty(1.2f);
  v1::GenerateRequest second = TokensRequest(p2, 16, 2, id);
  second.mutable_sampling()->set_presence_penalty(0.7f);
  const Streamed g1 = RunGenerate(server.client(), first);
  const Streamed g2 = RunGenerate(server.client(), second);
  ASSERT_TRUE(g1.status.ok() && g2.status.ok());
  EXPECT_EQ(g2.last.usage().session_tokens(), 5 + 16 + 2 + 16);

  v1::GenerateRequest once = second;
  once.clear_session_id();
  once.mutable_token_ids()->mutable_ids()->Clear();
  for (int32_t t : Concat({p1, g1.tokens, p2})) once.mutable_token_ids()->add_ids(t);
  const Streamed whole = RunGenerate(server.client(), once);
  ASSERT_TRUE(whole.status.ok());
  EXPECT_EQ(whole.tokens, g2.tokens);
  EXPECT_EQ(server.client().GetSession(id)->num_tokens(), 39);
}

TEST_F(GenerateTest, StopStringsStopTokensAndLogprobs) {
  TestServer server(model_, Options());
  v1::GenerateRequest request = TokensRequest({5, 6}, 40, 8);
  request.mutable_sampling()->set_temperature(0);
  request.set_top_logprobs(3);
  const Streamed free_run = RunGenerate(server.client(), request);
  ASSERT_TRUE(free_run.status.ok());
  // Logprobs come with every token.
  request.set_top_logprobs(0);
  v1::GenerateRequest with_logprobs = TokensRequest({5, 6}, 3, 8);
  with_logprobs.mutable_sampling()->set_temperature(0);
  with_logprobs.set_top_logprobs(3);
  ASSERT_TRUE(server.client()
                  .Generate(with_logprobs,
                            [](const v1::GenerateResponse& m) {
                              for (const auto& t : m.tokens()) {
                                EXPECT_EQ(t.top_logprobs_size(), 3);
                                EXPECT_EQ(t.top_logprobs(0).id(), t.id());
                                EXPECT_LE(t.logprob(), 0);
                              }
                              return true;
                            })
                  .ok());

  request.add_stop_token_ids(free_run.tokens[3]);
  const Streamed stopped = RunGenerate(server.client(), request);
  EXPECT_EQ(stopped.last.finish_reason(), v1::FINISH_REASON_STOP);
  const size_t first = std::find(free_run.tokens.begin(), free_run.tokens.end(),
                                 free_run.tokens[3]) - free_run.tokens.begin();
  EXPECT_EQ(stopped.tokens.size(), first + 1);
}

// prompt_logprobs over gRPC: the first message carries every prompt token with its logprob
// (given the tokens before it) and alternatives, before any generated token; with
// max_new_tokens 0 nothing is generated; a negative value is refused by name.
TEST_F(GenerateTest, PromptLogprobsComeFirstAndMaxNewTokensZeroScoresOnly) {
  TestServer server(model_, Options());
  const std::vector<int32_t> prompt = {5, 6, 7, 200, 13};
  for (int32_t max_new_tokens : {0, 3}) {
    SCOPED_TRACE(max_new_tokens);
    v1::GenerateRequest request = TokensRequest(prompt, max_new_tokens, 8);
    request.set_prompt_logprobs(2);
    const std::vector<v1::GenerateResponse> messages = Messages(server.client(), request);
    ASSERT_FALSE(messages.empty());
    std::vector<int32_t> ids;
    int generated = 0;
    for (const v1::GenerateResponse& m : messages) {
      if (m.prompt_tokens_size() > 0) {
        EXPECT_EQ(generated, 0) << "prompt tokens after a token";
      }
      for (const v1::PromptToken& t : m.prompt_tokens()) {
        ids.push_back(t.id());
        // This model has no BOS: the first token has nothing before it.
        if (ids.size() == 1) {
          EXPECT_FALSE(t.has_logprob());
          EXPECT_EQ(t.top_logprobs_size(), 0);
          continue;
        }
        ASSERT_TRUE(t.has_logprob());
        EXPECT_LE(t.logprob(), 0);
        ASSERT_EQ(t.top_logprobs_size(), 2);
        EXPECT_GE(t.top_logprobs(0).logprob(), t.logprob());
      }
      generated += m.tokens_size();
    }
    EXPECT_EQ(ids, prompt);
    EXPECT_EQ(generated, max_new_tokens);
    EXPECT_EQ(messages.back().usage().generated_tokens(), max_new_tokens);
    EXPECT_EQ(messages.back().finish_reason(), v1::FINISH_REASON_LENGTH);
  }
  v1::GenerateRequest negative = TokensRequest(prompt, 1, 8);
  negative.set_prompt_logprobs(-1);
  const absl::Status status =
      server.client().Generate(negative, [](const v1::GenerateResponse&) { return true; });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("prompt_logprobs"));
}

// n = 3 over gRPC: every message holds one choice's tokens (`choice`), each choice's last
// message its finish_reason, the stream's last message the usage (the prompt once, the tokens
// summed); choice i is the one-choice request with seed + i. An n the server cannot hold at once
// is refused by name.
TEST_F(GenerateTest, ChoicesStreamWithTheirIndexAndEqualOneChoiceRequests) {
  TestServer server(model_, Options());
  v1::GenerateRequest request = TokensRequest({5, 6, 7, 8}, 12, 30);
  request.set_n(3);
  std::vector<std::vector<int32_t>> tokens(3);
  std::vector<int> finishes(3, 0);
  const std::vector<v1::GenerateResponse> messages = Messages(server.client(), request);
  ASSERT_GE(messages.size(), 4u);
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    const v1::GenerateResponse& m = messages[i];
    ASSERT_GE(m.choice(), 0);
    ASSERT_LT(m.choice(), 3);
    EXPECT_FALSE(m.has_usage());
    for (const v1::GeneratedToken& t : m.tokens()) tokens[m.choice()].push_back(t.id());
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      EXPECT_EQ(m.finish_reason(), v1::FINISH_REASON_LENGTH);
      ++finishes[m.choice()];
    }
  }
  EXPECT_EQ(finishes, std::vector<int>({1, 1, 1}));
  const v1::GenerateResponse& last = messages.back();
  EXPECT_EQ(last.tokens_size(), 0);
  EXPECT_EQ(last.usage().prompt_tokens(), 4);
  EXPECT_EQ(last.usage().generated_tokens(), 3 * 12);
  EXPECT_EQ(last.usage().seed(), 30u);
  EXPECT_FALSE(last.request_id().empty());
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const Streamed one = RunGenerate(server.client(), TokensRequest({5, 6, 7, 8}, 12, 30 + i));
    ASSERT_TRUE(one.status.ok()) << one.status;
    EXPECT_EQ(tokens[i], one.tokens);
  }
  request.set_n(300);
  EXPECT_THAT(RunGenerate(server.client(), request).status.message(), HasSubstr("n:"));
}

// A random model knows nothing of the grammar: the mask alone keeps every sample in it.
TEST_F(GenerateTest, AGrammarConstraintGivesTextTheGrammarAccepts) {
  TestServer server(model_, Options());
  const std::regex accepted(R"(((ab)|(c[0-9]{1,3})), ((ab)|(c[0-9]{1,3}))(, ((ab)|(c[0-9]{1,3})))?\.)");
  for (uint64_t seed = 0; seed < 20; ++seed) {
    v1::GenerateRequest request = TokensRequest({5, 6}, 200, seed);
    request.set_ignore_eos(false);
    request.mutable_sampling()->set_temperature(1);
    request.mutable_constraint()->set_grammar(
        "root ::= item \", \" item (\", \" item)? \".\"\nitem ::= \"ab\" | \"c\" [0-9]{1,3}\n");
    const Streamed out = RunGenerate(server.client(), request);
    ASSERT_TRUE(out.status.ok()) << out.status;
    EXPECT_TRUE(std::regex_match(out.text, accepted)) << seed << ": " << out.text;
    EXPECT_EQ(out.last.finish_reason(), v1::FINISH_REASON_CONSTRAINT_COMPLETE) << seed;
  }
  v1::GenerateRequest regex = TokensRequest({5, 6}, 200, 1);
  regex.set_ignore_eos(false);
  regex.mutable_constraint()->set_regex("(yes|no)!");
  const Streamed answer = RunGenerate(server.client(), regex);
  ASSERT_TRUE(answer.status.ok()) << answer.status;
  EXPECT_TRUE(answer.text == "yes!" || answer.text == "no!") << answer.text;

  v1::GenerateRequest bad = TokensRequest({5, 6}, 10, 1);
  bad.mutable_constraint()->set_grammar("start ::= \"a\"");
  const Streamed refused = RunGenerate(server.client(), bad);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status.message()), HasSubstr("constraint.grammar: "));
  // TokensRequest sets ignore_eos, which a constraint refuses.
  bad.mutable_constraint()->set_regex("a+");
  const Streamed ignoring = RunGenerate(server.client(), bad);
  EXPECT_EQ(ignoring.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ignoring.status.message()), HasSubstr("ignore_eos"));
}

TEST_F(GenerateTest, ASlowReaderGetsEveryTokenMergedIntoFewerMessages) {
  TestServer server(model_, Options());
  const v1::GenerateRequest request = TokensRequest({4, 5, 6}, 20000, 77);
  const Streamed fast = RunGenerate(server.client(), request);
  ASSERT_TRUE(fast.status.ok());
  // Reads nothing more until the server has generated everything. Only one write is in
  // flight at a time and a write takes longer than a decode step, so the tokens produced while
  // one is pending go together into the next message. (A client of its own: a fresh
  // connection.)
  std::unique_ptr<Client> reader = server.NewClient({});
  Streamed slow;
  bool first = true;
  slow.status = reader->Generate(request, [&](const v1::GenerateResponse& m) {
    const absl::Time give_up = absl::Now() + absl::Seconds(120);
    while (first && server.engine().stats().active_requests > 0 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    first = false;
    ++slow.messages;
    for (const v1::GeneratedToken& t : m.tokens()) slow.tokens.push_back(t.id());
    slow.text += m.text();
    slow.last = m;
    return true;
  });
  ASSERT_TRUE(slow.status.ok()) << slow.status;
  EXPECT_EQ(slow.tokens, fast.tokens);
  EXPECT_EQ(slow.text, fast.text);
  EXPECT_EQ(slow.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  // How many tokens share a message depends on gRPC's flow control and the machine; without
  // merging there would be exactly one message per token.
  EXPECT_LT(slow.messages, 20000) << "tokens were not merged while the reader stalled";
}

TEST_F(GenerateTest, TwoHundredCancelledStreamsFreeEverySlotWithinOneSecond) {
  TestServer server(model_, Options());
  const int32_t capacity = server.client().GetModelInfo()->slot_capacity();
  std::atomic<int> started{0};
  std::vector<std::unique_ptr<GenerateStream>> streams;
  std::vector<std::unique_ptr<std::atomic<bool>>> got;
  for (int i = 0; i < 200; ++i) {
    got.push_back(std::make_unique<std::atomic<bool>>(false));
    std::atomic<bool>* flag = got.back().get();
    streams.push_back(server.client().StartGenerate(
        TokensRequest({i % 200, 1}, 100000, i), [flag, &started](const v1::GenerateResponse&) {
          if (!flag->exchange(true)) ++started;
        }));
  }
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (started < 200 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(started, 200) << "not every stream started generating";
  EXPECT_EQ(server.client().GetModelInfo()->load().active_requests(), 200);

  for (auto& stream : streams) stream->Cancel();
  const absl::Time cancelled = absl::Now();
  for (auto& stream : streams) {
    EXPECT_EQ(stream->Wait().code(), absl::StatusCode::kCancelled);
  }
  int32_t free_slots = 0;
  while (absl::Now() - cancelled < absl::Seconds(1)) {
    free_slots = server.client().GetModelInfo()->load().free_slots();
    if (free_slots == capacity) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(free_slots, capacity) << "slots still held 1 s after the cancellations";
  EXPECT_EQ(server.engine().stats().active_requests, 0);
}

TEST_F(GenerateTest, DeadlineEndsTheStreamAndFreesTheSession) {
  TestServer server(model_, Options());
  const std::string id = server.client().CreateSession()->id();
  const Streamed timed_out =
      RunGenerate(server.client(), TokensRequest({1, 2}, 100000, 3, id),
                  {.timeout = absl::Milliseconds(300), .request_id = ""});
  EXPECT_EQ(timed_out.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GT(timed_out.tokens.size(), 0u);
  EXPECT_LT(timed_out.tokens.size(), 100000u);
  // The session is released and holds at least what the client saw.
  absl::StatusOr<v1::Session> session = server.client().GetSession(id);
  for (int i = 0; i < 200 && session.ok() && session->busy(); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    session = server.client().GetSession(id);
  }
  ASSERT_TRUE(session.ok());
  EXPECT_FALSE(session->busy());
  EXPECT_GE(session->num_tokens(), static_cast<int64_t>(2 + timed_out.tokens.size()));
  EXPECT_TRUE(RunGenerate(server.client(), TokensRequest({3}, 4, 3, id)).status.ok());
  const std::string counted =
      "linserve_grpc_requests_total{method=\"Generate\",code=\"DEADLINE_EXCEEDED\"} 1\n";
  for (int i = 0; i < 500; ++i) {  // counted when gRPC is done with the call
    if (server.metrics().RenderPrometheus().find(counted) != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(server.metrics().RenderPrometheus(), HasSubstr(counted));
}

TEST_F(GenerateTest, ASecondConcurrentRequestOnASessionIsAborted) {
  TestServer server(model_, Options());
  const std::string id = server.client().CreateSession()->id();
  std::atomic<bool> streaming{false};
  std::unique_ptr<GenerateStream> first = server.client().StartGenerate(
      TokensRequest({1}, 100000, 0, id), [&](const v1::GenerateResponse&) { streaming = true; });
  while (!streaming) absl::SleepFor(absl::Milliseconds(2));
  const Streamed second = RunGenerate(server.client(), TokensRequest({2}, 4, 0, id));
  EXPECT_EQ(second.status.code(), absl::StatusCode::kAborted);
  EXPECT_THAT(std::string(second.status.message()), HasSubstr("one request at a time"));
  EXPECT_EQ(server.client().ForkSession(id).status().code(), absl::StatusCode::kAborted);
  first->Cancel();
  EXPECT_EQ(first->Wait().code(), absl::StatusCode::kCancelled);
}

TEST_F(GenerateTest, CapacityOverflowIsResourceExhausted) {
  TestServerOptions options = Options();
  options.backend.max_slots = 1;
  options.engine.max_queue_depth = 2;
  options.engine.sessions.max_sessions = 2;
  TestServer server(model_, options);
  ASSERT_EQ(server.client().GetModelInfo()->slot_capacity(), 1);

  // One stream holds the only slot; two more wait for it and fill the queue.
  std::atomic<bool> streaming{false};
  std::vector<std::unique_ptr<GenerateStream>> streams;
  streams.push_back(server.client().StartGenerate(
      TokensRequest({1}, 100000, 0), [&](const v1::GenerateResponse&) { streaming = true; }));
  while (!streaming) absl::SleepFor(absl::Milliseconds(2));
  for (int queued = 1; queued <= 2; ++queued) {
    streams.push_back(
        server.client().StartGenerate(TokensRequest({2}, 3, 0), [](const v1::GenerateResponse&) {}));
    while (server.client().GetModelInfo()->load().queued_requests() < queued) {
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  const Streamed rejected = RunGenerate(server.client(), TokensRequest({3}, 3, 0));
  EXPECT_EQ(rejected.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(rejected.status.message()), HasSubstr("max_queue_depth (2)"));
  for (auto& stream : streams) stream->Cancel();
  for (auto& stream : streams) stream->Wait().IgnoreError();
  // The server learns of the cancellations a moment after the client.
  for (absl::StatusOr<v1::GetModelInfoResponse> info = server.client().GetModelInfo();
       info.ok() && (info->load().queued_requests() > 0 || info->load().active_requests() > 0);
       info = server.client().GetModelInfo()) {
    absl::SleepFor(absl::Milliseconds(2));
  }

  ASSERT_TRUE(server.client().CreateSession().ok());
  ASSERT_TRUE(server.client().CreateSession().ok());
  const absl::Status full = server.client().CreateSession().status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("max_sessions (2)"));
}

}  // namespace
}  // namespace linserve
