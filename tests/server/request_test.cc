#include "server/engine/request.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

class ValidateGenerateRequestTest : public ::testing::Test {
 protected:
  GenerateRequest Valid() const {
    GenerateRequest r;
    r.prompt = {1, 2, 3};
    r.max_new_tokens = 10;
    return r;
  }
  // Applies `mutate` to a valid request and expects INVALID_ARGUMENT naming `field` and
  // mentioning `limit`.
  void ExpectInvalid(const std::function<void(GenerateRequest&)>& mutate,
                     const std::string& field, const std::string& limit) {
    GenerateRequest r = Valid();
    mutate(r);
    const absl::Status status = ValidateGenerateRequest(r, limits_, config_);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(status.message()), HasSubstr(field + ":"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(limit));
  }

  ModelConfig config_ = TinyConfig();  // vocab 260
  RequestLimits limits_;
};

TEST_F(ValidateGenerateRequestTest, AcceptsAValidRequest) {
  EXPECT_TRUE(ValidateGenerateRequest(Valid(), limits_, config_).ok());
  // Scoring a prompt without generating.
  GenerateRequest scored = Valid();
  scored.max_new_tokens = 0;
  scored.prompt_logprobs = 20;
  EXPECT_TRUE(ValidateGenerateRequest(scored, limits_, config_).ok());
}

TEST_F(ValidateGenerateRequestTest, NamesEveryInvalidField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ExpectInvalid([](auto& r) { r.prompt.clear(); }, "prompt", "empty");
  ExpectInvalid([&](auto& r) { r.prompt.assign(limits_.max_prompt_tokens + 1, 5); }, "prompt",
                "65536");
  ExpectInvalid([](auto& r) { r.prompt[1] = 260; }, "prompt.token_ids[1]", "[0, 260)");
  ExpectInvalid([](auto& r) { r.prompt[0] = -1; }, "prompt.token_ids[0]", "[0, 260)");
  ExpectInvalid([](auto& r) { r.max_new_tokens = -1; }, "max_new_tokens", "[0, 4096]");
  ExpectInvalid([](auto& r) { r.max_new_tokens = 4097; }, "max_new_tokens", "[0, 4096]");
  ExpectInvalid([](auto& r) { r.n = 0; }, "n", "[1, 16] (max_choices)");
  ExpectInvalid([](auto& r) { r.n = 17; }, "n", "[1, 16] (max_choices)");
  ExpectInvalid([](auto& r) { r.n = 2, r.max_new_tokens = 0; }, "n", "max_new_tokens >= 1");
  ExpectInvalid([](auto& r) { r.n = 2, r.prompt_logprobs = 0; }, "n", "prompt_logprobs");
  ExpectInvalid([](auto& r) { r.n = 2, r.session_id = SessionId{std::string(32, 'a')}; }, "n",
                "needs session_choice");
  ExpectInvalid([](auto& r) { r.session_choice = 0; }, "session_choice",
                "only with a session_id and n > 1");
  ExpectInvalid(
      [](auto& r) {
        r.n = 2;
        r.session_id = SessionId{std::string(32, 'a')};
        r.session_choice = 2;
      },
      "session_choice", "[0, 2)");
  ExpectInvalid([](auto& r) { r.prompt_logprobs = -2; }, "prompt_logprobs", "[0, 20]");
  ExpectInvalid([](auto& r) { r.prompt_logprobs = 21; }, "prompt_logprobs", "[0, 20]");
  ExpectInvalid([](auto& r) { r.sampling.temperature = -0.5f; }, "sampling.temperature", ">= 0");
  ExpectInvalid([&](auto& r) { r.sampling.temperature = nan; }, "sampling.temperature", ">= 0");
  ExpectInvalid([](auto& r) { r.sampling.top_p = 0; }, "sampling.top_p", "(0, 1]");
  ExpectInvalid([](auto& r) { r.sampling.top_p = 1.5f; }, "sampling.top_p", "(0, 1]");
  ExpectInvalid([&](auto& r) { r.sampling.top_p = nan; }, "sampling.top_p", "(0, 1]");
  ExpectInvalid([](auto& r) { r.sampling.top_k = -1; }, "sampling.top_k", ">= 0");
  ExpectInvalid([](auto& r) { r.sampling.min_p = 2; }, "sampling.min_p", "[0, 1]");
  ExpectInvalid([](auto& r) { r.sampling.repetition_penalty = 0; },
                "sampling.repetition_penalty", "> 0");
  ExpectInvalid([](auto& r) { r.sampling.presence_penalty = 3; }, "sampling.presence_penalty",
                "[-2, 2]");
  ExpectInvalid([](auto& r) { r.sampling.frequency_penalty = -3; },
                "sampling.frequency_penalty", "[-2, 2]");
  ExpectInvalid([](auto& r) { r.sampling.logit_bias = {{3, 1.0f}, {260, 1.0f}}; },
                "sampling.logit_bias", "token 260 is outside the vocabulary [0, 260)");
  ExpectInvalid([](auto& r) { r.sampling.logit_bias = {{3, 101.0f}}; }, "sampling.logit_bias",
                "[-100, 100]");
  ExpectInvalid([](auto& r) { r.sampling.logit_bias = {{3, 1.0f}, {3, 2.0f}}; },
                "sampling.logit_bias", "token 3 is biased twice");
  ExpectInvalid([](auto& r) { r.sampling.logit_bias.assign(301, {1, 1.0f}); },
                "sampling.logit_bias", "301 entries exceed the limit of 300");
  ExpectInvalid([](auto& r) { r.stop.assign(17, "x"); }, "stop", "16");
  ExpectInvalid([](auto& r) { r.stop = {"ok", ""}; }, "stop[1]", "empty");
  ExpectInvalid([](auto& r) { r.stop = {std::string(257, 'x')}; }, "stop[0]", "256");
  ExpectInvalid([](auto& r) { r.stop_token_ids.assign(65, 1); }, "stop_token_ids", "64");
  ExpectInvalid([](auto& r) { r.stop_token_ids = {3, 999}; }, "stop_token_ids[1]", "[0, 260)");
  ExpectInvalid([](auto& r) { r.top_logprobs = 21; }, "top_logprobs", "[0, 20]");
  ExpectInvalid([](auto& r) { r.top_logprobs = -1; }, "top_logprobs", "[0, 20]");
}

// A model without a tokenizer generates no text: a stop string could never match.
TEST_F(ValidateGenerateRequestTest, StopStringsNeedATokenizer) {
  config_.tokenizer = TokenizerKind::kNone;
  EXPECT_TRUE(ValidateGenerateRequest(Valid(), limits_, config_).ok());
  GenerateRequest ids = Valid();
  ids.stop_token_ids = {5};
  EXPECT_TRUE(ValidateGenerateRequest(ids, limits_, config_).ok());
  ExpectInvalid([](auto& r) { r.stop = {"x"}; }, "stop", "use stop_token_ids");
}

TEST(RequestLimitsTest, RejectsNonPositiveLimits) {
  RequestLimits limits;
  EXPECT_TRUE(ValidateRequestLimits(limits).ok());
  limits.max_top_logprobs = 0;
  EXPECT_THAT(std::string(ValidateRequestLimits(limits).message()),
              HasSubstr("max_top_logprobs"));
}

TEST(RequestLimitsTest, TopLogprobsLimitIsWhatABackendReturns) {
  RequestLimits limits;
  limits.max_top_logprobs = kMaxTopLogprobs;
  EXPECT_TRUE(ValidateRequestLimits(limits).ok());
  limits.max_top_logprobs = kMaxTopLogprobs + 1;
  EXPECT_THAT(std::string(ValidateRequestLimits(limits).message()),
              HasSubstr("max_top_logprobs must be <= 20"));
}

}  // namespace
}  // namespace linserve
