// The C++ Sampler against reference/linserve_ref/sampling.py, the Python mirror of
// sampler.h's algorithm: the same logits, parameters and token masks must give exactly the same
// tokens.
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/format/safetensors.h"
#include "model/backend/sampler.h"
#include "nlohmann/json.hpp"
#include "tests/testing/scoped_temp_dir.h"

namespace linserve {
namespace {

constexpr int kVocab = 1000;
constexpr int kSteps = 60;
constexpr int kMaskWords = (kVocab + 31) / 32;

struct Case {
  SamplingParams params;
  float logit_scale;  // small: flat distributions whose nucleus holds hundreds of tokens
  bool masked = false;  // every step samples under a token mask
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  auto add = [&cases](float scale, auto set, bool masked = false) {
    SamplingParams p;
    set(p);
    cases.push_back({p, scale, masked});
  };
  add(2.0f, [](SamplingParams& p) { p.seed = 1; });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 0.0f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.3f;
  });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 0.7f;
    p.top_k = 20;
    p.seed = 2;
  });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 1.2f;
    p.top_p = 0.9f;
    p.seed = 3;
  });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 0.9f;
    p.min_p = 0.1f;
    p.seed = 4;
  });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 0.8f;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repetition_penalty = 1.1f;
    p.presence_penalty = 0.2f;
    p.frequency_penalty = -0.1f;
    p.seed = 0xfeedface12345678ull;
  });
  add(0.3f, [](SamplingParams& p) {
    p.top_p = 0.5f;
    p.seed = 5;
  });
  add(2.0f, [](SamplingParams& p) {
    p.temperature = 0.05f;
    p.repetition_penalty = 0.8f;
    p.seed = 6;
  });
  // Under token masks: greedy with penalties, and every filter at once.
  add(
      2.0f,
      [](SamplingParams& p) {
        p.temperature = 0.0f;
        p.repetition_penalty = 1.3f;
        p.presence_penalty = 0.5f;
        p.frequency_penalty = 0.3f;
      },
      /*masked=*/true);
  add(
      2.0f,
      [](SamplingParams& p) {
        p.temperature = 0.8f;
        p.top_k = 50;
        p.top_p = 0.95f;
        p.min_p = 0.05f;
        p.repetition_penalty = 1.1f;
        p.presence_penalty = 0.2f;
        p.frequency_penalty = -0.1f;
        p.seed = 7;
      },
      /*masked=*/true);
  add(
      0.3f, [](SamplingParams& p) { p.seed = 8; }, /*masked=*/true);
  // logit_bias: small biases that reorder the top tokens, a ban, on penalised tokens (< 40) too;
  // greedy, every filter, and under masks (a bias never lets a masked token through).
  auto biases = [](SamplingParams& p) {
    p.logit_bias = {{3, 2.5f}, {17, -1.25f}, {100, 3.0f}, {512, -100.0f}, {999, 1.5f}};
    for (int t = 200; t < 260; ++t) p.logit_bias.push_back({t, 0.25f * static_cast<float>(t % 7)});
  };
  add(2.0f, [&](SamplingParams& p) {
    biases(p);
    p.temperature = 0.0f;
    p.repetition_penalty = 1.3f;
  });
  add(2.0f, [&](SamplingParams& p) {
    biases(p);
    p.temperature = 0.8f;
    p.top_k = 50;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.presence_penalty = 0.2f;
    p.seed = 9;
  });
  add(
      2.0f,
      [&](SamplingParams& p) {
        biases(p);
        p.logit_bias.push_back({5, 100.0f});
        p.seed = 10;
      },
      /*masked=*/true);
  return cases;
}

// Step s's mask: alternately a random third of the vocabulary, a single token, and the tokens
// below 40 that the prompt makes penalised; the bits past the vocabulary are set (ignored).
std::vector<uint32_t> StepMask(std::mt19937_64& rng, int step) {
  std::vector<uint32_t> mask(kMaskWords, 0);
  auto allow = [&mask](int t) { mask[t / 32] |= uint32_t{1} << (t % 32); };
  switch (step % 3) {
    case 0:
      for (int t = 0; t < kVocab; ++t) {
        if (rng() % 3 == 0) allow(t);
      }
      break;
    case 1:
      allow(static_cast<int>(rng() % kVocab));
      break;
    default:
      for (int t = 0; t < 40; ++t) allow(t);
      break;
  }
  for (int t = kVocab; t < kMaskWords * 32; ++t) mask[t / 32] |= uint32_t{1} << (t % 32);
  return mask;
}

TEST(SamplerMirrorTest, PythonMirrorSamplesTheSameTokens) {
  const std::vector<Case> cases = Cases();
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  std::vector<float> logits;
  for (const Case& c : cases) {
    for (int i = 0; i < kSteps * kVocab; ++i) logits.push_back(c.logit_scale * normal(rng));
  }
  std::vector<int64_t> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back(static_cast<int64_t>(rng() % 40));
  // Every case has a mask per step; only the masked cases use them.
  std::vector<std::vector<uint32_t>> masks;
  std::vector<int64_t> mask_words;
  for (size_t i = 0; i < cases.size() * kSteps; ++i) {
    masks.push_back(StepMask(rng, static_cast<int>(i % kSteps)));
    mask_words.insert(mask_words.end(), masks.back().begin(), masks.back().end());
  }

  ScopedTempDir dir;
  const std::vector<SafetensorsWriteTensor> tensors = {
      {"logits", Dtype::kF32, {static_cast<int64_t>(cases.size()), kSteps, kVocab}, logits, {}},
      {"masks",
       Dtype::kI64,
       {static_cast<int64_t>(cases.size()), kSteps, kMaskWords},
       {},
       mask_words},
      {"prompt", Dtype::kI32, {static_cast<int64_t>(prompt.size())}, {}, prompt}};
  ASSERT_TRUE(WriteSafetensors(dir.Join("logits.safetensors"), tensors).ok());
  nlohmann::json params = nlohmann::json::array();
  for (const Case& c : cases) {
    const SamplingParams& p = c.params;
    nlohmann::json bias = nlohmann::json::array();
    for (const LogitBias& entry : p.logit_bias) bias.push_back({entry.token, entry.bias});
    params.push_back({{"temperature", p.temperature},
                      {"top_k", p.top_k},
                      {"top_p", p.top_p},
                      {"min_p", p.min_p},
                      {"repetition_penalty", p.repetition_penalty},
                      {"presence_penalty", p.presence_penalty},
                      {"frequency_penalty", p.frequency_penalty},
                      {"seed", p.seed},
                      {"logit_bias", bias},
                      {"masked", c.masked}});
  }
  std::ofstream(dir.Join("params.json")) << params.dump();

  const std::string cmd = std::string(LINSERVE_PYTHON) + " " + LINSERVE_SOURCE_DIR +
                          "/tests/model/sampler_mirror.py " + dir.path() + " >" +
                          dir.Join("tokens.json");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir.Join("tokens.json"));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json python = nlohmann::json::parse(text.str());
  ASSERT_EQ(python.size(), cases.size());

  std::vector<TokenId> prompt_ids(prompt.begin(), prompt.end());
  for (size_t c = 0; c < cases.size(); ++c) {
    Sampler sampler(cases[c].params);
    sampler.Observe(prompt_ids);
    std::vector<TokenId> cpp;
    for (int s = 0; s < kSteps; ++s) {
      const std::vector<uint32_t>& mask = masks[c * kSteps + s];
      cpp.push_back(
          sampler.Sample(absl::MakeConstSpan(logits).subspan((c * kSteps + s) * kVocab, kVocab),
                         cases[c].masked ? mask.data() : nullptr));
      if (cases[c].masked) {
        ASSERT_TRUE((mask[cpp.back() / 32] >> (cpp.back() % 32)) & 1u)
            << "case " << c << " step " << s << " picked " << cpp.back();
      }
    }
    EXPECT_EQ(cpp, python[c].get<std::vector<TokenId>>()) << "case " << c;
  }
}

}  // namespace
}  // namespace linserve
