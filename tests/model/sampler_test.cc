// Sampler: each filter and penalty, the exact draw of sampler.h's step 8, determinism per seed,
// parameter validation and TopLogprobs.
#include "model/backend/sampler.h"

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// Logits whose softmax is exactly proportional to `p` (up to rounding).
std::vector<float> LogitsFor(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

std::map<TokenId, int> Histogram(const SamplingParams& params, const std::vector<float>& logits,
                                 int draws) {
  Sampler s(params);
  std::map<TokenId, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.Sample(logits)];
  return h;
}

SamplingParams Params(uint64_t seed = 1) {
  SamplingParams p;
  p.seed = seed;
  return p;
}

TEST(SamplerTest, GreedyTakesTheFirstMaximum) {
  SamplingParams p = Params();
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.Sample(std::vector<float>{0.5f, 2.0f, -1.0f, 2.0f}), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 3.0f}), 0);
}

// Step 8 by hand: u = (rng() >> 11) · 2^-53 from std::mt19937_64(seed); the first id, in
// ascending order, whose cumulative probability exceeds u.
TEST(SamplerTest, DrawFollowsTheDocumentedInverseCdfWithOneDrawPerCall) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> logits = LogitsFor(probs);
  // The probabilities the sampler computes: softmax in double of the float logits.
  std::vector<double> p(4);
  double sum = 0;
  double mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, static_cast<double>(l));
  for (int i = 0; i < 4; ++i) sum += p[i] = std::exp(logits[i] - mx);
  for (double& x : p) x /= sum;

  for (uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefull}) {
    Sampler s(Params(seed));
    std::mt19937_64 rng(seed);
    for (int draw = 0; draw < 200; ++draw) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      TokenId expect = 3;
      double cumulative = 0;
      for (int i = 0; i < 4; ++i) {
        cumulative += p[i];
        if (cumulative > u) {
          expect = i;
          break;
        }
      }
      ASSERT_EQ(s.Sample(logits), expect) << "seed " << seed << " draw " << draw;
    }
  }
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  const std::vector<float> logits = LogitsFor({0.25, 0.75});
  SamplingParams p = Params(3);
  auto h = Histogram(p, logits, 20000);
  EXPECT_NEAR(h[1] / 20000.0, 0.75, 0.015);
  p.temperature = 0.05f;  // 3^20: practically always token 1
  h = Histogram(p, logits, 2000);
  EXPECT_EQ(h[1], 2000);
  p.temperature = 100.0f;  // nearly uniform
  h = Histogram(p, logits, 20000);
  EXPECT_NEAR(h[1] / 20000.0, 0.5, 0.015);
}

TEST(SamplerTest, TopKKeepsTheKMostLikelyWithTiesToLowerIds) {
  SamplingParams p = Params(4);
  p.top_k = 2;
  auto h = Histogram(p, {1.0f, 3.0f, 1.0f, 2.5f, 0.0f}, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[3], 0);
  h = Histogram(p, {1.0f, 1.0f, 1.0f, 0.0f}, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 4000.0, 0.5, 0.03);
  EXPECT_GT(h[1], 0);
  p.top_k = 100;  // more than the vocabulary: everything survives
  EXPECT_EQ(Histogram(p, {0.0f, 0.0f, 0.0f}, 300).size(), 3u);
}

TEST(SamplerTest, TopPKeepsTheShortestPrefixReachingP) {
  const std::vector<float> logits = LogitsFor({0.05, 0.5, 0.15, 0.3});
  SamplingParams p = Params(5);
  p.top_p = 0.75f;  // 0.5 + 0.3 reaches it
  auto h = Histogram(p, logits, 20000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[1] / 20000.0, 0.5 / 0.8, 0.015);
  p.top_p = 0.4f;  // the first token alone
  h = Histogram(p, logits, 500);
  EXPECT_EQ(h[1], 500);
  p.top_p = 0.9f;  // 0.95 with the third
  EXPECT_EQ(Histogram(p, logits, 20000).size(), 3u);
}

TEST(SamplerTest, TopPOverALargeVocabularyNeedsMoreThanThePartialSortsFirstBlock) {
  // 1000 equally likely tokens: reaching 0.5 needs 500 of them, ids 0..499 by (p desc, id asc).
  SamplingParams p = Params(6);
  p.top_p = 0.5f;
  auto h = Histogram(p, std::vector<float>(1000, 0.0f), 20000);
  EXPECT_LE(h.rbegin()->first, 500);  // 500 kept; rounding may keep one more
  EXPECT_GT(h.size(), 450u);
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheMostLikely) {
  const std::vector<float> logits = LogitsFor({0.5, 0.3, 0.15, 0.05});
  SamplingParams p = Params(7);
  p.min_p = 0.4f;  // threshold 0.2
  auto h = Histogram(p, logits, 20000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_NEAR(h[0] / 20000.0, 0.5 / 0.8, 0.015);
  p.min_p = 0.25f;  // threshold 0.125 keeps the third
  EXPECT_EQ(Histogram(p, logits, 20000).size(), 3u);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingParams p = Params();
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0});
    EXPECT_EQ(s.Sample(std::vector<float>{3.0f, 2.0f}), 1);  // 3 / 2 < 2
  }
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0});
    EXPECT_EQ(s.Sample(std::vector<float>{-1.0f, -1.5f}), 1);  // -1 · 2 < -1.5
  }
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0});
    EXPECT_EQ(s.Sample(std::vector<float>{5.0f, 2.0f}), 0);  // 5 / 2 > 2 still
  }
}

TEST(SamplerTest, PresencePenaltyOncePerTokenFrequencyPerOccurrence) {
  SamplingParams p = Params();
  p.temperature = 0.0f;
  p.presence_penalty = 0.4f;
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0, 0, 0});
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.5f}), 0);  // once: 1 − 0.4 > 0.5
  }
  p.presence_penalty = 0.6f;
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0});
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.5f}), 1);  // 1 − 0.6 < 0.5
  }
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.2f;
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0, 0});
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.5f}), 0);  // 1 − 0.4 > 0.5
  }
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0, 0, 0});
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.5f}), 1);  // 1 − 0.6 < 0.5
  }
  // Sampled tokens count as seen: greedy with a frequency penalty alternates.
  p.frequency_penalty = 2.0f;
  Sampler s(p);
  std::vector<TokenId> out;
  for (int i = 0; i < 4; ++i) out.push_back(s.Sample(std::vector<float>{1.0f, 0.0f}));
  EXPECT_EQ(out, (std::vector<TokenId>{0, 1, 0, 1}));
}

TEST(SamplerTest, PenaltiesIgnoreSeenIdsOutsideTheVocabulary) {
  SamplingParams p = Params();
  p.temperature = 0.0f;
  p.presence_penalty = 2.0f;
  Sampler s(p);
  s.Observe(std::vector<TokenId>{-5, 1000});
  EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.0f}), 0);
}

TEST(SamplerTest, LogitBiasIsAddedBeforePenaltiesAndNeverLiftsTheMask) {
  SamplingParams p = Params();
  p.temperature = 0.0f;
  p.logit_bias = {{1, 0.75f}};
  {
    Sampler s(p);
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, 0.5f}), 1);  // 0.5 + 0.75 > 1
  }
  // Before the repetition penalty: (2 + 2) / 2 = 2 < 2.5, where 2 / 2 + 2 = 3 would win.
  p.logit_bias = {{0, 2.0f}};
  p.repetition_penalty = 2.0f;
  {
    Sampler s(p);
    s.Observe(std::vector<TokenId>{0});
    EXPECT_EQ(s.Sample(std::vector<float>{2.0f, 2.5f}), 1);
  }
  // -100 bans, +100 forces, even when sampling at a high temperature.
  p = Params(3);
  p.temperature = 1.5f;
  p.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Histogram(p, {5.0f, 0.0f, 0.0f}, 200).count(0), 0u);
  p.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(Histogram(p, {5.0f, 0.0f, 0.0f}, 200), (std::map<TokenId, int>{{2, 200}}));
  // A masked token stays out whatever its bias.
  const uint32_t allow_0_and_1 = 0b011;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) EXPECT_NE(s.Sample(std::vector<float>{0.0f, 0.0f, 0.0f}, &allow_0_and_1), 2);
  // Ids outside the vocabulary are ignored by Sample (the backends refuse them at
  // StartSampling): the unbiased argmax.
  p.temperature = 0.0f;
  p.logit_bias = {{0, 0.5f}, {7, 100.0f}};
  Sampler outside(p);
  EXPECT_EQ(outside.Sample(std::vector<float>{0.0f, 1.0f}), 1);
  EXPECT_THAT(std::string(CheckLogitBiasVocabulary(p.logit_bias, 2).message()),
              HasSubstr("logit_bias: token 7 is outside the vocabulary [0, 2)"));
  EXPECT_TRUE(CheckLogitBiasVocabulary(p.logit_bias, 8).ok());
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> steps(100, std::vector<float>(50));
  for (auto& step : steps) {
    for (float& x : step) x = normal(rng);
  }
  auto run = [&](uint64_t seed) {
    SamplingParams p = Params(seed);
    p.top_k = 20;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.2f;
    p.presence_penalty = 0.1f;
    p.frequency_penalty = 0.1f;
    Sampler s(p);
    std::vector<TokenId> out;
    for (const auto& step : steps) out.push_back(s.Sample(step));
    return out;
  };
  EXPECT_EQ(run(77), run(77));
  EXPECT_NE(run(77), run(78));
}

TEST(SamplerTest, ValidationNamesTheFieldAndRange) {
  auto message = [](SamplingParams p) {
    const absl::Status s = ValidateSamplingParams(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  SamplingParams p;
  p.temperature = -0.1f;
  EXPECT_THAT(message(p), HasSubstr("temperature = -0.1 is outside [0, inf)"));
  p.temperature = NAN;
  EXPECT_THAT(message(p), HasSubstr("temperature"));
  p = {};
  p.temperature = INFINITY;
  EXPECT_THAT(message(p), HasSubstr("temperature"));
  p = {};
  p.top_k = -1;
  EXPECT_THAT(message(p), HasSubstr("top_k = -1"));
  p = {};
  p.top_p = 0.0f;
  EXPECT_THAT(message(p), HasSubstr("top_p = 0 is outside (0, 1]"));
  p.top_p = 1.5f;
  EXPECT_THAT(message(p), HasSubstr("top_p"));
  p = {};
  p.min_p = 1.01f;
  EXPECT_THAT(message(p), HasSubstr("min_p = 1.01 is outside [0, 1]"));
  p = {};
  p.repetition_penalty = 0.0f;
  EXPECT_THAT(message(p), HasSubstr("repetition_penalty = 0 is outside (0, inf)"));
  p = {};
  p.presence_penalty = 2.5f;
  EXPECT_THAT(message(p), HasSubstr("presence_penalty = 2.5 is outside [-2, 2]"));
  p = {};
  p.frequency_penalty = -2.5f;
  EXPECT_THAT(message(p), HasSubstr("frequency_penalty = -2.5 is outside [-2, 2]"));
  p = {};
  p.logit_bias = {{4, 100.5f}};
  EXPECT_THAT(message(p), HasSubstr("logit_bias: the bias of token 4 = 100.5 is outside [-100, 100]"));
  p.logit_bias = {{4, NAN}};
  EXPECT_THAT(message(p), HasSubstr("the bias of token 4"));
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_THAT(message(p), HasSubstr("logit_bias: token -1 is not a token id"));
  p.logit_bias = {{4, 1.0f}, {2, 1.0f}, {4, -1.0f}};
  EXPECT_THAT(message(p), HasSubstr("logit_bias: token 4 is biased twice"));
  p.logit_bias.clear();
  for (int t = 0; t < kMaxLogitBias; ++t) p.logit_bias.push_back({t, -100.0f});
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  p.logit_bias.push_back({kMaxLogitBias, 100.0f});
  EXPECT_THAT(message(p), HasSubstr("logit_bias: 301 entries exceed the limit of 300"));
}

// A prompt position's score: LogProbOf and TopLogprobs with one log partition, bit for bit.
TEST(TopLogprobsTest, ScoreIntoIsLogProbOfAndTopLogprobs) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -4.0f};
  std::vector<int32_t> ids;
  for (TokenId token : {0, 3, 4}) {
    std::vector<TokenLogprob> top(3);
    EXPECT_EQ(ScoreInto(logits, token, 3, ids, top.data()), LogProbOf(logits, token));
    const std::vector<TokenLogprob> expected = TopLogprobs(logits, 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(top[k].token, expected[k].token);
      EXPECT_EQ(top[k].logprob, expected[k].logprob);
    }
  }
  EXPECT_EQ(ScoreInto(logits, 2, 0, ids, nullptr), LogProbOf(logits, 2));
}

TEST(TopLogprobsTest, LogSoftmaxOfRawLogitsMostLikelyFirst) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  const double log_z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // tie with 3: lower id first
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - log_z, 1e-6);
  EXPECT_NEAR(top[2].logprob, 2.0 - log_z, 1e-6);
  EXPECT_EQ(TopLogprobs(logits, 10).size(), 4u);
  EXPECT_TRUE(TopLogprobs(logits, 0).empty());
}

}  // namespace
}  // namespace linserve
