// Sampler under token masks (sampler.h's step 0): picks never leave the mask whatever the
// parameters, a masked pick is the pick from the allowed tokens' logits alone (the renormalised
// allowed distribution), logprobs are of the masked distribution, bits past the vocabulary mean
// nothing and a mask allowing no token is refused.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/sampler.h"
#include "model/backend/token_mask.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

std::vector<uint32_t> MaskOf(int vocab, const std::vector<TokenId>& allowed) {
  std::vector<uint32_t> mask(static_cast<size_t>(TokenMaskWords(vocab)), 0);
  for (TokenId t : allowed) mask[t / 32] |= uint32_t{1} << (t % 32);
  return mask;
}

// About `fraction` of [0, vocab), at least one token.
std::vector<TokenId> RandomAllowed(int vocab, double fraction, std::mt19937_64& rng) {
  std::vector<TokenId> allowed;
  std::bernoulli_distribution keep(fraction);
  for (TokenId t = 0; t < vocab; ++t) {
    if (keep(rng)) allowed.push_back(t);
  }
  if (allowed.empty()) allowed.push_back(static_cast<TokenId>(rng() % vocab));
  return allowed;
}

std::vector<float> RandomLogits(int vocab, float scale, std::mt19937_64& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> logits;
  for (int i = 0; i < vocab; ++i) logits.push_back(scale * normal(rng));
  return logits;
}

// Every option of SamplingParams, in the combinations the tests run.
std::vector<SamplingParams> ParamSets(uint64_t seed) {
  std::vector<SamplingParams> sets;
  SamplingParams p;
  p.seed = seed;
  sets.push_back(p);  // plain temperature 1
  p.temperature = 0.0f;
  p.repetition_penalty = 1.4f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.3f;
  sets.push_back(p);  // greedy with penalties
  p.temperature = 0.8f;
  p.top_k = 5;
  sets.push_back(p);
  p.top_k = 0;
  p.top_p = 0.6f;
  sets.push_back(p);
  p.top_p = 1.0f;
  p.min_p = 0.2f;
  sets.push_back(p);
  p.top_k = 30;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.frequency_penalty = -0.2f;
  sets.push_back(p);  // everything at once
  return sets;
}

TEST(SamplerMaskTest, PicksNeverLeaveTheMaskAcrossSeedsAndOptions) {
  constexpr int kVocab = 300;
  std::mt19937_64 rng(3);
  for (uint64_t seed = 0; seed < 40; ++seed) {
    for (const SamplingParams& params : ParamSets(seed)) {
      Sampler sampler(params);
      sampler.Observe({1, 2, 3, 5, 8, 13, 21});
      for (int step = 0; step < 25; ++step) {
        // Sparse and dense masks; the logits favour disallowed tokens half of the time.
        const std::vector<TokenId> allowed = RandomAllowed(kVocab, step % 2 ? 0.02 : 0.5, rng);
        const std::vector<uint32_t> mask = MaskOf(kVocab, allowed);
        std::vector<float> logits = RandomLogits(kVocab, 3.0f, rng);
        if (step % 2 == 0) {
          for (int t = 0; t < kVocab; ++t) {
            if (!TokenAllowed(mask.data(), t)) logits[t] += 20.0f;
          }
        }
        const TokenId token = sampler.Sample(logits, mask.data());
        ASSERT_TRUE(TokenAllowed(mask.data(), token))
            << "seed " << seed << " step " << step << " temperature " << params.temperature
            << " picked " << token;
      }
    }
  }
}

// The masked pick equals an unmasked Sampler's pick over the allowed tokens' logits alone
// (renumbered in id order): the same random stream, the same seen counts, every option.
TEST(SamplerMaskTest, MaskedPickIsThePickFromTheAllowedTokensAlone) {
  constexpr int kVocab = 200;
  std::mt19937_64 rng(5);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const std::vector<TokenId> allowed = RandomAllowed(kVocab, 0.3, rng);
    const std::vector<uint32_t> mask = MaskOf(kVocab, allowed);
    std::vector<TokenId> compact_of(kVocab, -1);
    for (size_t i = 0; i < allowed.size(); ++i) compact_of[allowed[i]] = static_cast<TokenId>(i);
    // Prompt tokens, allowed and not; only the allowed ones can matter.
    const std::vector<TokenId> prompt = {allowed[0], allowed.back(), 7, 7, 150};
    std::vector<TokenId> compact_prompt;
    for (TokenId t : prompt) {
      if (compact_of[t] >= 0) compact_prompt.push_back(compact_of[t]);
    }
    for (const SamplingParams& params : ParamSets(seed)) {
      Sampler masked(params);
      Sampler compact(params);
      masked.Observe(prompt);
      compact.Observe(compact_prompt);
      for (int step = 0; step < 30; ++step) {
        const std::vector<float> logits = RandomLogits(kVocab, step % 3 ? 2.0f : 0.2f, rng);
        std::vector<float> allowed_logits;
        for (TokenId t : allowed) allowed_logits.push_back(logits[t]);
        const TokenId got = masked.Sample(logits, mask.data());
        const TokenId want = allowed[compact.Sample(allowed_logits)];
        ASSERT_EQ(got, want) << "seed " << seed << " step " << step << " temperature "
                             << params.temperature << " top_k " << params.top_k;
      }
    }
  }
}

// Temperature 1 and no filter, by hand: p = softmax over the allowed tokens, u from the
// stream, the first allowed id (ascending) whose cumulative probability exceeds u.
TEST(SamplerMaskTest, DrawWalksTheRenormalisedAllowedDistribution) {
  const std::vector<float> logits = {5.0f, 0.0f, 1.0f, 9.0f, 0.5f, 2.0f};
  const std::vector<TokenId> allowed = {1, 2, 4};
  const std::vector<uint32_t> mask = MaskOf(6, allowed);
  double z = 0;
  for (TokenId t : allowed) z += std::exp(static_cast<double>(logits[t]) - 1.0);
  for (uint64_t seed : {0ull, 9ull, 77ull}) {
    SamplingParams params;
    params.seed = seed;
    Sampler sampler(params);
    std::mt19937_64 stream(seed);
    for (int draw = 0; draw < 300; ++draw) {
      const double u = static_cast<double>(stream() >> 11) * 0x1.0p-53;
      TokenId expect = allowed.back();
      double cumulative = 0;
      for (TokenId t : allowed) {
        cumulative += std::exp(static_cast<double>(logits[t]) - 1.0) / z;
        if (cumulative > u) {
          expect = t;
          break;
        }
      }
      ASSERT_EQ(sampler.Sample(logits, mask.data()), expect) << "seed " << seed << " draw " << draw;
    }
  }
}

TEST(SamplerMaskTest, OneAllowedTokenIsAlwaysPicked) {
  const std::vector<float> logits = {9.0f, 1.0f, -30.0f, 4.0f};
  const std::vector<uint32_t> mask = MaskOf(4, {2});
  for (const SamplingParams& params : ParamSets(11)) {
    Sampler sampler(params);
    for (int i = 0; i < 20; ++i) ASSERT_EQ(sampler.Sample(logits, mask.data()), 2);
  }
  // top_k = 1 keeps the best allowed token, not the best token.
  SamplingParams top1;
  top1.top_k = 1;
  Sampler sampler(top1);
  const std::vector<uint32_t> two = MaskOf(4, {1, 2});
  for (int i = 0; i < 20; ++i) ASSERT_EQ(sampler.Sample(logits, two.data()), 1);
}

TEST(SamplerMaskTest, GreedyTakesTheFirstAllowedMaximumAfterPenalties) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.presence_penalty = 2.0f;
  Sampler sampler(params);
  sampler.Observe({1});
  const std::vector<float> logits = {8.0f, 3.0f, 2.5f, 2.5f, 9.0f};
  const std::vector<uint32_t> mask = MaskOf(5, {1, 2, 3});
  // 1 is penalised to 1.0; 2 and 3 tie at 2.5: the lower id.
  EXPECT_EQ(sampler.Sample(logits, mask.data()), 2);
}

TEST(SamplerMaskTest, LogprobsAreOfTheMaskedDistribution) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 4.0f, 0.5f};
  const std::vector<uint32_t> mask = MaskOf(5, {0, 2, 4});
  const double log_z = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(0.5));
  EXPECT_NEAR(LogProbOf(logits, 2, mask.data()), 2.0 - log_z, 1e-6);
  EXPECT_NEAR(LogProbOf(logits, 4, mask.data()), 0.5 - log_z, 1e-6);
  EXPECT_EQ(LogProbOf(logits, 3, mask.data()), -std::numeric_limits<float>::infinity());

  // Five asked, three allowed: the allowed most likely first, then the disallowed by id at -inf.
  const std::vector<TokenLogprob> top = TopLogprobs(logits, 5, mask.data());
  ASSERT_EQ(top.size(), 5u);
  const std::vector<TokenId> order = {2, 0, 4, 1, 3};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(top[i].token, order[i]) << i;
  EXPECT_NEAR(top[0].logprob, 2.0 - log_z, 1e-6);
  EXPECT_NEAR(top[2].logprob, 0.5 - log_z, 1e-6);
  EXPECT_EQ(top[3].logprob, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(top[4].logprob, -std::numeric_limits<float>::infinity());
  // No mask: the whole vocabulary, as before.
  EXPECT_EQ(TopLogprobs(logits, 1, nullptr)[0].token, 3);
}

TEST(SamplerMaskTest, BitsPastTheVocabularyAreIgnored) {
  constexpr int kVocab = 40;  // two words, 24 unused bits in the second
  std::mt19937_64 rng(8);
  const std::vector<uint32_t> clean = MaskOf(kVocab, {3, 17, 33});
  std::vector<uint32_t> dirty = clean;
  dirty[1] |= 0xFFFFFF00u;  // tokens 40..63
  for (const SamplingParams& params : ParamSets(4)) {
    Sampler a(params);
    Sampler b(params);
    for (int step = 0; step < 50; ++step) {
      std::vector<float> logits = RandomLogits(kVocab, 2.0f, rng);
      ASSERT_EQ(a.Sample(logits, clean.data()), b.Sample(logits, dirty.data())) << step;
    }
  }
  std::vector<float> logits = RandomLogits(kVocab, 2.0f, rng);
  EXPECT_EQ(TopLogprobs(logits, 5, clean.data())[4].token,
            TopLogprobs(logits, 5, dirty.data())[4].token);
  EXPECT_TRUE(CheckTokenMask(dirty.data(), kVocab, "m").ok());
  // Only bits past the vocabulary: nothing allowed.
  const std::vector<uint32_t> outside = {0u, 0xFFFFFF00u};
  EXPECT_FALSE(CheckTokenMask(outside.data(), kVocab, "m").ok());
}

TEST(SamplerMaskTest, AMaskAllowingNoTokenIsRefusedNamingIt) {
  const std::vector<uint32_t> empty(3, 0);
  const absl::Status s =
      CheckTokenMask(empty.data(), 70, "DecodeAndSample: row 2's allowed_tokens");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("row 2's allowed_tokens allows no token"));
  EXPECT_THAT(s.message(), HasSubstr("[0, 70)"));
  EXPECT_TRUE(CheckTokenMask(nullptr, 70, "m").ok());
  const std::vector<uint32_t> last = MaskOf(70, {69});
  EXPECT_TRUE(CheckTokenMask(last.data(), 70, "m").ok());
  const std::vector<uint32_t> full_word = MaskOf(64, {0});
  EXPECT_TRUE(CheckTokenMask(full_word.data(), 64, "m").ok());
}

}  // namespace
}  // namespace linserve
