// The sliding_window_attention mixer: its parameters and state checks, the CPU component against
// a dense windowed attention written out here (absolute-position RoPE, mask t − window < s ≤ t),
// chunked prefill against steps, and a model mixing it with linear_attention.
#include "model/layers/sliding_window_attention.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/format/config.h"
#include "model/format/session_state.h"
#include "model/layers/ffn.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear_attention.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cpu_mixer_harness.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kHeads = 2;
constexpr int32_t kHeadDim = 8;
constexpr int32_t kDModel = 16;

SlidingWindowAttentionParams Swa(int32_t window, int32_t rotary_dim, double rope_base = 10000) {
  return {.n_heads = kHeads,
          .head_dim = kHeadDim,
          .window = window,
          .rotary_dim = rotary_dim,
          .rope_base = rope_base,
          .bias = true};
}

ComponentSpec SwaMixer(const SlidingWindowAttentionParams& p) {
  return {.kind = "sliding_window_attention", .params = p.ToValues()};
}

ComponentSpec LinearMixer() {
  const LinearAttentionParams p{.n_heads = 4, .head_dim = 4, .feature_dim = 4};
  return {.kind = "linear_attention", .params = p.ToValues()};
}

LayerSpec Layer(ComponentSpec mixer) {
  const FfnParams ffn{.d_ff = 32, .activation = Activation::kGelu, .bias = true};
  return {.mixer = std::move(mixer),
          .norm = {.kind = "layer_norm", .params = LayerNormParams{}.ToValues()},
          .mlp = {.kind = "ffn", .params = ffn.ToValues()}};
}

// A byte-tokenizer model of these layers, through config.json text.
ModelConfig LayersConfig(const std::vector<LayerSpec>& layers) {
  ModelConfig c = TinyConfig();
  c.d_model = kDModel;
  c.n_layers = static_cast<int32_t>(layers.size());
  c.position = PositionEmbedding::kNone;
  c.layers = layers;
  c.final_norm = layers.back().norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "config.json");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return *parsed;
}

// The mixer of a one-layer model alone on the CPU, over `slots` sessions' state slices.
struct Mixer : CpuMixerHarness {
  Mixer(const SlidingWindowAttentionParams& p, int slots, uint64_t seed)
      : CpuMixerHarness(LayersConfig({Layer(SwaMixer(p))}), slots, seed,
                        BackendOptions{}.prefill_chunk_size, /*max_rows=*/64) {}
};

// y = W x + b in double, W [out, in] row-major.
std::vector<double> Project(const Tensor& w, const Tensor& b, const double* x) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double acc = b.empty() ? 0.0 : b.data[static_cast<size_t>(o)];
    for (int64_t i = 0; i < in; ++i) acc += double{w.data[static_cast<size_t>(o * in + i)]} * x[i];
    y[static_cast<size_t>(o)] = acc;
  }
  return y;
}

// RoPE at absolute position `position` on each head of `x` (n_heads × head_dim).
void Rotate(const SlidingWindowAttentionParams& p, int64_t position, std::vector<double>& x) {
  const int half = p.rotary_dim / 2;
  for (int h = 0; h < p.n_heads; ++h) {
    double* head = x.data() + h * p.head_dim;
    for (int i = 0; i < half; ++i) {
      const double angle = position * std::pow(p.rope_base, -2.0 * i / p.rotary_dim);
      const double a = head[i], b = head[i + half];
      head[i] = a * std::cos(angle) - b * std::sin(angle);
      head[i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
}

// The mixer's definition, densely: token t attends to s in (t − window, t] with softmax of
// RoPE_t(q_t) · RoPE_s(k_s) / √head_dim, positions counted from the first row of `x`.
std::vector<double> DenseWindowAttention(const SlidingWindowAttentionParams& p,
                                         const LayerWeights& w, absl::Span<const float> x) {
  const int64_t rows = static_cast<int64_t>(x.size()) / kDModel;
  std::vector<std::vector<double>> q, k, v;
  for (int64_t t = 0; t < rows; ++t) {
    const std::vector<double> row(x.begin() + t * kDModel, x.begin() + (t + 1) * kDModel);
    q.push_back(Project(w.FindOrEmpty("attn.q_proj.weight"), w.FindOrEmpty("attn.q_proj.bias"),
                        row.data()));
    k.push_back(Project(w.FindOrEmpty("attn.k_proj.weight"), w.FindOrEmpty("attn.k_proj.bias"),
                        row.data()));
    v.push_back(Project(w.FindOrEmpty("attn.v_proj.weight"), w.FindOrEmpty("attn.v_proj.bias"),
                        row.data()));
    Rotate(p, t, q.back());
    Rotate(p, t, k.back());
  }
  std::vector<double> out;
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> attn(static_cast<size_t>(p.n_heads) * p.head_dim, 0.0);
    for (int h = 0; h < p.n_heads; ++h) {
      const int64_t first = std::max<int64_t>(0, t - p.window + 1);
      std::vector<double> weights;
      for (int64_t s = first; s <= t; ++s) {
        double dot = 0.0;
        for (int i = 0; i < p.head_dim; ++i) {
          dot += q[t][h * p.head_dim + i] * k[s][h * p.head_dim + i];
        }
        weights.push_back(std::exp(dot / std::sqrt(static_cast<double>(p.head_dim))));
      }
      double sum = 0.0;
      for (double e : weights) sum += e;
      for (int64_t s = first; s <= t; ++s) {
        for (int i = 0; i < p.head_dim; ++i) {
          attn[h * p.head_dim + i] += weights[s - first] / sum * v[s][h * p.head_dim + i];
        }
      }
    }
    const std::vector<double> y = Project(w.FindOrEmpty("attn.o_proj.weight"),
                                          w.FindOrEmpty("attn.o_proj.bias"), attn.data());
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

struct Case {
  int32_t window;
  int32_t rotary_dim;
  double rope_base;
};

// Steps and a one-pass prefill from the zero state both give the dense computation, for
// sequences shorter than, as long as and longer than the window; both leave the same ring, with
// count = min(tokens, window − 1) and next = tokens mod (window − 1).
TEST(SlidingWindowAttentionTest, StepsAndPrefillEqualTheDenseWindow) {
  for (const Case& c : {Case{4, kHeadDim, 10000}, Case{4, 4, 10}, Case{4, 0, 10000},
                        Case{1, kHeadDim, 10000}, Case{7, 6, 3}}) {
    for (int tokens : {c.window - 1, c.window, 3 * c.window + 2}) {
      if (tokens == 0) continue;
      SCOPED_TRACE(absl::StrCat("window ", c.window, ", rotary_dim ", c.rotary_dim, ", rope_base ",
                                c.rope_base, ", tokens ", tokens));
      const SlidingWindowAttentionParams p = Swa(c.window, c.rotary_dim, c.rope_base);
      Mixer mixer(p, 2, 3);
      const std::vector<float> x = RandomRows(kDModel, tokens, 11);
      const std::vector<double> dense =
          DenseWindowAttention(p, mixer.model.weights.layers[0], x);
      EXPECT_LE(RelativeError(mixer.Steps(0, x), dense), 1e-5);
      EXPECT_LE(RelativeError(mixer.Prefill(1, x), dense), 1e-5);
      const std::vector<float> state = mixer.State(0);
      EXPECT_EQ(mixer.State(1), state);
      const int64_t ring = c.window - 1;
      EXPECT_EQ(state[static_cast<size_t>(p.CountOffset())], std::min<int64_t>(tokens, ring));
      EXPECT_EQ(state[static_cast<size_t>(p.CountOffset() + 1)], ring == 0 ? 0 : tokens % ring);
    }
  }
}

// The dense check can fail: a window one token wider gives other outputs.
TEST(SlidingWindowAttentionTest, TheDenseCheckSeesTheWindowsEdge) {
  const SlidingWindowAttentionParams p = Swa(4, 4, 10);
  Mixer mixer(p, 1, 3);
  const std::vector<float> x = RandomRows(kDModel, 9, 11);
  SlidingWindowAttentionParams wider = p;
  wider.window = 5;
  EXPECT_GT(RelativeError(mixer.Steps(0, x),
                          DenseWindowAttention(wider, mixer.model.weights.layers[0], x)),
            1e-3);
}

// Prefill in chunks, whatever their boundaries relative to the window, gives bitwise the steps'
// outputs and state.
TEST(SlidingWindowAttentionTest, ChunkedPrefillIsBitwiseTheSteps) {
  const SlidingWindowAttentionParams p = Swa(5, 6, 100);
  const std::vector<float> x = RandomRows(kDModel, 23, 5);
  Mixer steps(p, 1, 9);
  const std::vector<float> want = steps.Steps(0, x);
  for (const std::vector<int>& chunks : std::vector<std::vector<int>>{
           {23}, {1, 22}, {3, 3, 3, 3, 3, 3, 3, 2}, {4, 4, 4, 4, 4, 3}, {2, 9, 1, 11}, {7, 16}}) {
    SCOPED_TRACE(absl::StrJoin(chunks, ","));
    Mixer chunked(p, 1, 9);
    std::vector<float> got;
    size_t row = 0;
    for (int n : chunks) {
      const std::vector<float> out = chunked.Prefill(
          0, absl::MakeConstSpan(x).subspan(row * kDModel, static_cast<size_t>(n) * kDModel));
      got.insert(got.end(), out.begin(), out.end());
      row += static_cast<size_t>(n);
    }
    EXPECT_EQ(got, want);
    EXPECT_EQ(chunked.State(0), steps.State(0));
  }
}

// One decode pass over several slots, each at its own point in its ring, gives bitwise what each
// slot's step gives alone.
TEST(SlidingWindowAttentionTest, ABatchOfSlotsStepsEachAsAlone) {
  const SlidingWindowAttentionParams p = Swa(5, kHeadDim);
  Mixer batched(p, 3, 4);
  Mixer alone(p, 3, 4);
  const std::vector<int> history = {2, 4, 11};
  for (int32_t slot = 0; slot < 3; ++slot) {
    const std::vector<float> x = RandomRows(kDModel, history[static_cast<size_t>(slot)], 20 + slot);
    batched.Prefill(slot, x);
    alone.Prefill(slot, x);
  }
  const std::vector<float> next = RandomRows(kDModel, 3, 30);
  const std::vector<int32_t> slots = {2, 0, 1};
  const std::vector<float> got = batched.Decode(slots, next);
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::vector<float> want = alone.Decode(
        {&slots[i], 1}, absl::MakeConstSpan(next).subspan(i * kDModel, kDModel));
    EXPECT_EQ(std::vector<float>(got.begin() + i * kDModel, got.begin() + (i + 1) * kDModel),
              want);
  }
  EXPECT_EQ(batched.states, alone.states);
}

// A random model of linear_attention and sliding_window_attention layers (window 1 included)
// gives the same logits and state by prefill in chunks of 1, 7 and 16 as by steps.
TEST(SlidingWindowAttentionTest, AMixedModelGivesTheSameLogitsByPrefillAndBySteps) {
  const ModelConfig config =
      LayersConfig({Layer(LinearMixer()), Layer(SwaMixer(Swa(6, 4))), Layer(LinearMixer()),
                    Layer(SwaMixer(Swa(1, 0)))});
  const Model model = MakeRandomModel(config, 17);
  std::vector<TokenId> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 53 + 7) % 256);
  const int64_t vocab = config.vocab_size;

  absl::StatusOr<std::unique_ptr<Backend>> recurrent = CreateCpuBackend(model, {});
  ASSERT_TRUE(recurrent.ok()) << recurrent.status();
  const SlotId r = *(*recurrent)->AllocateSlot();
  std::vector<float> step_logits(tokens.size() * vocab);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const DecodeItem item{r, tokens[t]};
    ASSERT_TRUE((*recurrent)
                    ->Decode({&item, 1}, absl::MakeSpan(step_logits).subspan(t * vocab, vocab))
                    .ok());
  }
  StateBlob want;
  ASSERT_TRUE((*recurrent)->ReadSlot(r, want).ok());

  for (int chunk : {1, 7, 16}) {
    SCOPED_TRACE(chunk);
    BackendOptions options;
    options.prefill_chunk_size = chunk;
    absl::StatusOr<std::unique_ptr<Backend>> chunked = CreateCpuBackend(model, options);
    ASSERT_TRUE(chunked.ok()) << chunked.status();
    const SlotId s = *(*chunked)->AllocateSlot();
    std::vector<float> logits(tokens.size() * vocab);
    ASSERT_TRUE((*chunked)->Prefill(s, tokens, absl::MakeSpan(logits)).ok());
    StateBlob got;
    ASSERT_TRUE((*chunked)->ReadSlot(s, got).ok());
    EXPECT_EQ(got.position, want.position);
    EXPECT_LE(RelativeError(got.state, ToDouble(want.state)), 1e-5);
    EXPECT_LE(RelativeError(logits, ToDouble(step_logits)), 1e-4);
    EXPECT_TRUE(ValidateSessionState(config, got.position, got.state, 1e18f).ok());
  }
}

nlohmann::json SwaJson() {
  return {{"kind", "sliding_window_attention"}, {"n_heads", 2}, {"head_dim", 8}, {"window", 5}};
}

nlohmann::json LayerJson(const nlohmann::json& mixer) {
  return {{"mixer", mixer}, {"norm", {{"kind", "layer_norm"}}},
          {"mlp", {{"kind", "ffn"}, {"d_ff", 32}}}};
}

nlohmann::json ConfigJson(const nlohmann::json& second_mixer) {
  return {{"vocab_size", 260},
          {"d_model", 16},
          {"layers",
           {LayerJson({{"kind", "linear_attention"}, {"n_heads", 4}, {"head_dim", 4}}),
            LayerJson(second_mixer)}}};
}

std::string ParseError(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump(), "config.json");
  EXPECT_FALSE(c.ok()) << "accepted " << j.dump();
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(SlidingWindowAttentionTest, ConfigDefaultsAndStateSize) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(SwaJson()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const SlidingWindowAttentionParams p =
      SlidingWindowAttentionParams::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.rotary_dim, 8);
  EXPECT_EQ(p.rope_base, 10000);
  EXPECT_FALSE(p.bias);
  EXPECT_FALSE(c->IsSingleBlock());
  // Ring of 4 entries × 2 heads × (k, v of 8), then count and next.
  const int64_t linear = 4 * 4 * 5;
  EXPECT_EQ(c->StateFloatsPerSlot(), linear + 4 * 2 * 2 * 8 + 2);
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers, c->layers);
}

TEST(SlidingWindowAttentionTest, ConfigRefusalsNameTheField) {
  nlohmann::json mixer = SwaJson();
  mixer["rotary_dim"] = 3;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.rotary_dim\": must be even"));
  mixer["rotary_dim"] = 10;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.rotary_dim\": must be at most head_dim (8), "
                        "got 10"));
  mixer = SwaJson();
  mixer["window"] = 0;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.window\": must be in [1, 65536]"));
  mixer.erase("window");
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.window\": is required"));
  mixer = SwaJson();
  mixer["rope_base"] = 0;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.rope_base\": must be in (0, 1e+09]"));
  mixer = SwaJson();
  mixer["feature_map"] = "relu";
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("unknown field \"layers[1].mixer.feature_map\""));
}

// Imported states: the ring's values like every slice's, and counters the ring can hold.
TEST(SlidingWindowAttentionTest, ImportedStatesWithImpossibleCountersAreRefused) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(SwaJson()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t base = 4 * 4 * 5;  // layer 1's slice starts after layer 0's
  const int64_t count = base + 4 * 32;
  const int64_t next = count + 1;
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.5f);
  const auto set = [&](int64_t index, float value) { state[static_cast<size_t>(index)] = value; };
  const auto error = [&] {
    return std::string(ValidateSessionState(*c, 10, state, 1e18f).message());
  };
  set(count, 4);
  set(next, 2);
  EXPECT_EQ(error(), "");
  set(count, 2);
  EXPECT_EQ(error(), "");

  set(count, 5);
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("state[", count, "] (layer 1, count): 5 is not a "
                                              "whole number of ring entries in [0, 4]")));
  set(count, 1.5f);
  EXPECT_THAT(error(), HasSubstr("(layer 1, count): 1.5 is not a whole number"));
  set(count, -1);
  EXPECT_THAT(error(), HasSubstr("(layer 1, count): -1 is not a whole number"));
  set(count, 4);
  set(next, 4);
  EXPECT_THAT(error(), HasSubstr(absl::StrCat("state[", next, "] (layer 1, next): 4 is not a ring "
                                              "entry index in [0, 3]")));
  set(count, 1);
  set(next, 3);
  EXPECT_THAT(error(), HasSubstr("(layer 1, next): 3 differs from count (1) while the ring is "
                                 "not full"));
  set(next, 1);
  EXPECT_EQ(error(), "");

  // Ring entry 3, head 1, v[2]: entries of 2 heads × 16, v after k.
  set(base + 3 * 32 + 16 + 8 + 2, std::nanf(""));
  EXPECT_THAT(error(), HasSubstr("(layer 1, ring 3, head 1, v[2]): nan is not finite"));
  set(base + 3 * 32 + 16 + 8 + 2, 0.5f);
  set(base + 2 * 32 + 5, 1e30f);
  EXPECT_THAT(error(), HasSubstr("(layer 1, ring 2, head 0, k[5]): 1e+30 exceeds"));
}

TEST(SlidingWindowAttentionTest, AWindowOfOneHasOnlyZeroCounters) {
  nlohmann::json mixer = SwaJson();
  mixer["window"] = 1;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(mixer).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t count = 4 * 4 * 5;
  EXPECT_EQ(c->StateFloatsPerSlot(), count + 2);
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.0f);
  EXPECT_TRUE(ValidateSessionState(*c, 3, state, 1e18f).ok());
  state[static_cast<size_t>(count)] = 1;
  EXPECT_THAT(ValidateSessionState(*c, 3, state, 1e18f).message(),
              HasSubstr("(layer 1, count): 1 is not a whole number of ring entries in [0, 0]"));
  state[static_cast<size_t>(count)] = 0;
  state[static_cast<size_t>(count + 1)] = 1;
  EXPECT_THAT(ValidateSessionState(*c, 3, state, 1e18f).message(),
              HasSubstr("(layer 1, next): 1 is not a ring entry index in [0, 0]"));
}

}  // namespace
}  // namespace linserve
