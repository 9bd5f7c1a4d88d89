// The mamba2 mixer and the MLP kind "none" on the CPU: their parameters, tensors and state checks;
// the component against Mamba-2 written out here in double; prefill in pieces (the chunked form)
// against token-by-token steps, a batch against each slot alone, a state exported and imported,
// and models of Mamba's block (no MLP) mixed with other layers, pre- and post-norm. Parity with
// the PyTorch reference is golden_test's, with fla's code test_convert_fla's.
#include "model/layers/mamba2.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/format/config.h"
#include "model/format/session_state.h"
#include "model/format/weights.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear_attention.h"
#include "model/layers/none.h"
#include "model/layers/rms_norm.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cpu_mixer_harness.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kDModel = 16;

Mamba2Params Mamba() { return {.n_heads = 4, .head_dim = 4, .state_size = 6, .n_groups = 2}; }

// The other switches: D per channel, the norm before the gate, a dt ceiling that binds, no conv
// bias, in/out biases, one group.
Mamba2Params MambaVariant() {
  return {.n_heads = 2,
          .head_dim = 6,
          .state_size = 4,
          .n_groups = 1,
          .conv_size = 3,
          .conv_bias = false,
          .bias = true,
          .d_has_hdim = true,
          .norm_before_gate = true,
          .dt_limit_min = 0.05,
          .dt_limit_max = 0.4};
}

ComponentSpec MambaMixer(const Mamba2Params& p) { return {Mamba2Kind().name, p.ToValues()}; }

// Mamba's block: the mixer and no MLP.
LayerSpec MambaLayer(const Mamba2Params& p) {
  return {.mixer = MambaMixer(p),
          .norm = {RmsNormKind().name, RmsNormParams{}.ToValues()},
          .mlp = {NoneKind().name, {}}};
}

LayerSpec LinearLayer() {
  return {
      .mixer = {LinearAttentionKind().name,
                LinearAttentionParams{.n_heads = 2, .head_dim = 8, .feature_dim = 8}.ToValues()},
      .norm = {RmsNormKind().name, RmsNormParams{}.ToValues()},
      .mlp = {GatedMlpKind().name, GatedMlpParams{.d_ff = 24}.ToValues()}};
}

// A byte-tokenizer model of these layers, through config.json text.
ModelConfig LayersConfig(const std::vector<LayerSpec>& layers,
                         NormPlacement norm = NormPlacement::kPre) {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = kDModel;
  c.eos_token_id = 257;
  c.position = PositionEmbedding::kNone;
  c.tie_embeddings = false;
  c.norm = norm;
  c.n_layers = static_cast<int32_t>(layers.size());
  c.layers = layers;
  c.final_norm = {RmsNormKind().name, RmsNormParams{}.ToValues()};
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "LayersConfig");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *std::move(parsed) : c;
}

// The mixer of a one-layer model (Mamba's block) alone on the CPU, over `slots` sessions' state
// slices.
struct Mixer : CpuMixerHarness {
  Mixer(const Mamba2Params& p, int slots, uint64_t seed, int chunk = 64)
      : CpuMixerHarness(LayersConfig({MambaLayer(p)}), slots, seed, chunk) {}
};

// ---- Mamba-2 in double, from the layer's tensors ----

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// The mixer's output rows (d_model each, out_proj included) for rows `x` from the zero state.
std::vector<double> Reference(const Mamba2Params& p, const LayerWeights& w,
                              absl::Span<const float> x) {
  const int64_t di = p.InnerDim(), gn = p.GroupStateDim(), channels = p.ConvChannels();
  const int64_t cols = p.InColumns(), h_count = p.n_heads, pd = p.head_dim, ns = p.state_size;
  const int rows = static_cast<int>(x.size() / kDModel);
  const Tensor& in_w = w.At("mamba.in_proj.weight");
  std::vector<std::vector<double>> raw;  // x | B | C before the convolution, per row
  std::vector<double> s(static_cast<size_t>(p.HistoryOffset()), 0.0);
  std::vector<double> out;
  for (int t = 0; t < rows; ++t) {
    std::vector<double> proj(static_cast<size_t>(cols));
    for (int64_t o = 0; o < cols; ++o) {
      for (int64_t i = 0; i < kDModel; ++i) {
        proj[o] += static_cast<double>(in_w.data[o * kDModel + i]) * x[t * kDModel + i];
      }
      if (p.bias) proj[o] += w.At("mamba.in_proj.bias").data[o];
    }
    raw.emplace_back(proj.begin() + di, proj.begin() + di + channels);
    std::vector<double> xbc(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) {
      double acc = p.conv_bias ? w.At("mamba.conv1d.bias").data[c] : 0.0;
      for (int j = 0; j < p.conv_size; ++j) {
        const int src = t - (p.conv_size - 1) + j;
        if (src >= 0) acc += w.At("mamba.conv1d.weight").data[c * p.conv_size + j] * raw[src][c];
      }
      xbc[c] = Silu(acc);
    }
    std::vector<double> y(static_cast<size_t>(di));
    for (int64_t h = 0; h < h_count; ++h) {
      const int64_t g = h / (h_count / p.n_groups);
      const double z = proj[di + channels + h] + w.At("mamba.dt_bias").data[h];
      const double dt = std::clamp(std::log1p(std::exp(z)), p.dt_limit_min, p.dt_limit_max);
      const double decay =
          std::exp(-std::exp(static_cast<double>(w.At("mamba.A_log").data[h])) * dt);
      double* sh = s.data() + h * ns * pd;
      for (int64_t n = 0; n < ns; ++n) {
        for (int64_t j = 0; j < pd; ++j) {
          sh[n * pd + j] = sh[n * pd + j] * decay + xbc[di + g * ns + n] * dt * xbc[h * pd + j];
        }
      }
      for (int64_t j = 0; j < pd; ++j) {
        double o = 0;
        for (int64_t n = 0; n < ns; ++n) o += sh[n * pd + j] * xbc[di + gn + g * ns + n];
        const double d = w.At("mamba.D").data[p.d_has_hdim ? h * pd + j : h];
        y[h * pd + j] = o + d * xbc[h * pd + j];
      }
    }
    for (int64_t c = 0; c < di; ++c) {
      if (!p.rmsnorm || !p.norm_before_gate) y[c] *= Silu(proj[c]);
    }
    if (p.rmsnorm) {
      const int64_t size = di / p.n_groups;
      for (int64_t g = 0; g < p.n_groups; ++g) {
        double sum = 0;
        for (int64_t c = 0; c < size; ++c) sum += y[g * size + c] * y[g * size + c];
        const double inv = 1.0 / std::sqrt(sum / static_cast<double>(size) + p.norm_eps);
        for (int64_t c = 0; c < size; ++c) {
          y[g * size + c] *= inv * w.At("mamba.norm.weight").data[g * size + c];
          if (p.norm_before_gate) y[g * size + c] *= Silu(proj[g * size + c]);
        }
      }
    }
    const Tensor& out_w = w.At("mamba.out_proj.weight");
    for (int64_t o = 0; o < kDModel; ++o) {
      double acc = p.bias ? w.At("mamba.out_proj.bias").data[o] : 0.0;
      for (int64_t c = 0; c < di; ++c) acc += static_cast<double>(out_w.data[o * di + c]) * y[c];
      out.push_back(acc);
    }
  }
  return out;
}

// The component gives Mamba-2 written out above, by steps and by one prefill, for every switch.
TEST(Mamba2Test, StepsAndPrefillAreMamba2) {
  Mamba2Params no_norm = Mamba();
  no_norm.rmsnorm = false;
  for (const Mamba2Params& p : {Mamba(), MambaVariant(), no_norm}) {
    SCOPED_TRACE(ModelConfigToJson(LayersConfig({MambaLayer(p)})));
    const std::vector<float> x = RandomRows(kDModel, 90, 3);
    Mixer steps(p, 1, 5);
    Mixer prefill(p, 1, 5);
    const std::vector<double> want = Reference(p, steps.model.weights.layers[0], x);
    EXPECT_LE(RelativeError(steps.Steps(0, x), want), 1e-5);
    EXPECT_LE(RelativeError(prefill.Prefill(0, x), want), 1e-5);
  }
}

// The check above can fail: the gate on the other side of the norm, or no dt ceiling where one
// binds, gives other outputs.
TEST(Mamba2Test, TheDirectCheckSeesTheNormAndTheDtLimit) {
  const std::vector<float> x = RandomRows(kDModel, 30, 3);
  Mixer layer(MambaVariant(), 1, 5);
  const std::vector<float> got = layer.Steps(0, x);
  Mamba2Params wrong = MambaVariant();
  wrong.norm_before_gate = false;
  EXPECT_GT(RelativeError(got, Reference(wrong, layer.model.weights.layers[0], x)), 1e-2);
  wrong = MambaVariant();
  wrong.dt_limit_max = 1e30;
  EXPECT_GT(RelativeError(got, Reference(wrong, layer.model.weights.layers[0], x)), 1e-2);
}

// Prefill in pieces of 1, 7, 64 and 150 tokens (chunks of 64: the chunked form; a chunk boundary
// anywhere against the convolution's history) gives the steps' outputs and state up to rounding
// (relative 1e-5), and bitwise where every chunk is one token.
TEST(Mamba2Test, PrefillInPiecesEqualsTheSteps) {
  for (const Mamba2Params& p : {Mamba(), MambaVariant()}) {
    const std::vector<float> x = RandomRows(kDModel, 150, 7);
    Mixer steps(p, 1, 9);
    const std::vector<float> want = steps.Steps(0, x);
    for (const auto& [piece, chunk] : std::vector<std::pair<int, int>>{
             {1, 64}, {7, 64}, {64, 64}, {150, 64}, {150, 1}, {150, 7}, {150, 150}}) {
      SCOPED_TRACE(absl::StrCat("pieces of ", piece, ", chunks of ", chunk));
      Mixer chunked(p, 1, 9, chunk);
      std::vector<float> got;
      for (size_t row = 0; row < 150; row += static_cast<size_t>(piece)) {
        const size_t n = std::min<size_t>(static_cast<size_t>(piece), 150 - row);
        const std::vector<float> out =
            chunked.Prefill(0, absl::MakeConstSpan(x).subspan(row * kDModel, n * kDModel));
        got.insert(got.end(), out.begin(), out.end());
      }
      EXPECT_LE(RelativeError(got, ToDouble(want)), 1e-5);
      EXPECT_LE(RelativeError(chunked.State(0), ToDouble(steps.State(0))), 1e-5);
      if (piece == 1 || chunk == 1) {
        EXPECT_EQ(got, want);
        EXPECT_EQ(chunked.State(0), steps.State(0));
      }
    }
  }
}

// One decode pass over several slots gives bitwise what each slot's step gives alone.
TEST(Mamba2Test, ABatchOfSlotsStepsEachAsAlone) {
  Mixer batched(Mamba(), 3, 4);
  Mixer alone(Mamba(), 3, 4);
  const std::vector<int> history = {1, 5, 11};
  for (int32_t slot = 0; slot < 3; ++slot) {
    const std::vector<float> x = RandomRows(kDModel, history[static_cast<size_t>(slot)], 20 + slot);
    batched.Prefill(slot, x);
    alone.Prefill(slot, x);
  }
  const std::vector<float> next = RandomRows(kDModel, 3, 30);
  const std::vector<int32_t> slots = {2, 0, 1};
  const std::vector<float> got = batched.Decode(slots, next);
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::vector<float> want =
        alone.Decode({&slots[i], 1}, absl::MakeConstSpan(next).subspan(i * kDModel, kDModel));
    EXPECT_EQ(std::vector<float>(got.begin() + i * kDModel, got.begin() + (i + 1) * kDModel), want);
  }
  EXPECT_EQ(batched.states, alone.states);
}

std::vector<TokenId> Tokens(int n) {
  std::vector<TokenId> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i * 53 + 7) % 256);
  return tokens;
}

std::unique_ptr<Backend> Cpu(const Model& model, int chunk) {
  BackendOptions options;
  options.prefill_chunk_size = chunk;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

// Models of Mamba's blocks (no MLP) among other layers, pre- and post-norm, give the same logits
// and state by prefill in chunks of 1, 7, 64 and 150 as by steps, and a valid state; the layers
// without an MLP hold no ln2.
TEST(Mamba2Test, MixedModelsGiveTheSameLogitsByPrefillAndBySteps) {
  for (NormPlacement norm : {NormPlacement::kPre, NormPlacement::kPost}) {
    const ModelConfig config =
        LayersConfig({MambaLayer(Mamba()), LinearLayer(), MambaLayer(MambaVariant())}, norm);
    SCOPED_TRACE(ModelConfigToJson(config));
    const Model model = MakeRandomModel(config, 17);
    EXPECT_FALSE(model.weights.layers[0].tensors.contains("ln2.weight"));
    EXPECT_TRUE(model.weights.layers[1].tensors.contains("ln2.weight"));
    const std::vector<TokenId> tokens = Tokens(150);
    const int64_t vocab = config.vocab_size;
    std::unique_ptr<Backend> recurrent = Cpu(model, 64);
    const SlotId r = *recurrent->AllocateSlot();
    std::vector<float> step_logits(tokens.size() * vocab);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const DecodeItem item{r, tokens[t]};
      ASSERT_TRUE(
          recurrent->Decode({&item, 1}, absl::MakeSpan(step_logits).subspan(t * vocab, vocab))
              .ok());
    }
    StateBlob want;
    ASSERT_TRUE(recurrent->ReadSlot(r, want).ok());
    for (int chunk : {1, 7, 64, 150}) {
      SCOPED_TRACE(chunk);
      std::unique_ptr<Backend> chunked = Cpu(model, chunk);
      const SlotId s = *chunked->AllocateSlot();
      std::vector<float> logits(tokens.size() * vocab);
      ASSERT_TRUE(chunked->Prefill(s, tokens, absl::MakeSpan(logits)).ok());
      StateBlob got;
      ASSERT_TRUE(chunked->ReadSlot(s, got).ok());
      EXPECT_LE(RelativeError(got.state, ToDouble(want.state)), 1e-5);
      EXPECT_LE(RelativeError(logits, ToDouble(step_logits)), 1e-4);
      if (chunk == 1) {
        EXPECT_EQ(got.state, want.state);
      }
      EXPECT_TRUE(ValidateSessionState(config, got.position, got.state, 1e18f).ok());
    }
  }
}

// A state read out, written into another backend's slot and a copied slot continue exactly.
TEST(Mamba2Test, ExportedImportedAndForkedStatesContinueExactly) {
  const Model model =
      MakeRandomModel(LayersConfig({MambaLayer(Mamba()), LinearLayer(), MambaLayer(Mamba())}), 19);
  const int64_t vocab = model.config.vocab_size;
  std::unique_ptr<Backend> a = Cpu(model, 16);
  std::unique_ptr<Backend> b = Cpu(model, 16);
  const SlotId from = *a->AllocateSlot();
  ASSERT_TRUE(a->Prefill(from, Tokens(40), {}).ok());
  StateBlob blob;
  ASSERT_TRUE(a->ReadSlot(from, blob).ok());
  const SlotId imported = *b->AllocateSlot();
  ASSERT_TRUE(b->WriteSlot(imported, blob).ok());
  const SlotId fork = *a->AllocateSlot();
  ASSERT_TRUE(a->CopySlot(from, fork).ok());
  for (int step = 0; step < 10; ++step) {
    const TokenId token = (step * 31 + 5) % 256;
    std::vector<float> want(vocab), got_imported(vocab), got_fork(vocab);
    const DecodeItem w{from, token}, i{imported, token}, f{fork, token};
    ASSERT_TRUE(a->Decode({&w, 1}, absl::MakeSpan(want)).ok());
    ASSERT_TRUE(b->Decode({&i, 1}, absl::MakeSpan(got_imported)).ok());
    ASSERT_TRUE(a->Decode({&f, 1}, absl::MakeSpan(got_fork)).ok());
    EXPECT_EQ(got_imported, want) << "step " << step;
    EXPECT_EQ(got_fork, want) << "step " << step;
  }
}

// ---- config.json, tensors and imported states ----

nlohmann::json MambaJson() {
  return {{"kind", "mamba2"}, {"n_heads", 4}, {"head_dim", 2}, {"state_size", 3}};
}

nlohmann::json ConfigJson(const nlohmann::json& mixer, const nlohmann::json& mlp) {
  return {{"vocab_size", 260},
          {"d_model", 16},
          {"layers",
           {{{"mixer", {{"kind", "linear_attention"}, {"n_heads", 4}, {"head_dim", 4}}},
             {"norm", {{"kind", "layer_norm"}}},
             {"mlp", {{"kind", "ffn"}, {"d_ff", 32}}}},
            {{"mixer", mixer}, {"norm", {{"kind", "rms_norm"}}}, {"mlp", mlp}}}}};
}

std::string ParseError(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump(), "config.json");
  EXPECT_FALSE(c.ok()) << "accepted " << j.dump();
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(Mamba2Test, ConfigDefaultsStateSizeAndTensors) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig(ConfigJson(MambaJson(), {{"kind", "none"}}).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const Mamba2Params p = Mamba2Params::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.n_groups, 1);
  EXPECT_EQ(p.conv_size, 4);
  EXPECT_TRUE(p.conv_bias);
  EXPECT_FALSE(p.bias);
  EXPECT_FALSE(p.d_has_hdim);
  EXPECT_TRUE(p.rmsnorm);
  EXPECT_FALSE(p.norm_before_gate);
  EXPECT_EQ(p.dt_limit_min, 0);
  EXPECT_EQ(p.dt_limit_max, 1e30);
  EXPECT_EQ(p.norm_eps, 1e-5);
  // S: 4 heads × 3 × 2; history: 3 rows of x (8) | B (3) | C (3).
  EXPECT_EQ(c->StateFloatsPerSlot(), 4 * 4 * 5 + 4 * 3 * 2 + 3 * 14);
  std::vector<std::string> names;
  for (const TensorDecl& t : Mamba2Kind().tensors(p.ToValues(), 16)) {
    names.push_back(absl::StrCat(t.name, absl::StrJoin(t.shape, "x")));
  }
  EXPECT_EQ(absl::StrJoin(names, " "),
            "mamba.in_proj.weight26x16 mamba.conv1d.weight14x4 mamba.conv1d.bias14 "
            "mamba.dt_bias4 mamba.A_log4 mamba.D4 mamba.norm.weight8 mamba.out_proj.weight16x8");
  // The layer without an MLP holds no ln2, and weights with one are refused naming it.
  ModelWeights weights = MakeRandomWeights(*c, 1);
  EXPECT_FALSE(weights.layers[1].tensors.contains("ln2.weight"));
  EXPECT_TRUE(weights.layers[1].tensors.contains("ln1.weight"));
  weights.layers[1].tensors["ln2.weight"] = weights.layers[1].tensors["ln1.weight"];
  EXPECT_THAT(std::string(ValidateWeights(*c, weights).message()),
              HasSubstr("layers.1.ln2.weight"));
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers, c->layers);
}

TEST(Mamba2Test, ConfigRefusalsNameTheField) {
  const auto with = [](const char* field, const nlohmann::json& value) {
    nlohmann::json mixer = MambaJson();
    mixer[field] = value;
    return ConfigJson(mixer, {{"kind", "none"}});
  };
  EXPECT_THAT(ParseError(with("n_groups", 3)),
              HasSubstr("field \"layers[1].mixer.n_groups\": must divide n_heads (4), got 3"));
  EXPECT_THAT(ParseError(with("state_size", 0)),
              HasSubstr("field \"layers[1].mixer.state_size\": must be in [1, 1024]"));
  nlohmann::json limits = MambaJson();
  limits["dt_limit_min"] = 0.5;
  limits["dt_limit_max"] = 0.1;
  EXPECT_THAT(ParseError(ConfigJson(limits, {{"kind", "none"}})),
              HasSubstr("field \"layers[1].mixer.dt_limit_max\": must be at least dt_limit_min"));
  EXPECT_THAT(ParseError(with("dt_limit_max", -1)),
              HasSubstr("field \"layers[1].mixer.dt_limit_max\": must be in [0, 1e+30]"));
  EXPECT_THAT(ParseError(ConfigJson(MambaJson(), {{"kind", "none"}, {"d_ff", 8}})),
              HasSubstr("unknown field \"layers[1].mlp.d_ff\""));
}

// Imported states: a bad value is located by head and S entry, or by history row and x/B/C.
TEST(Mamba2Test, ImportedStatesWithBadValuesAreRefusedNamingWhere) {
  absl::StatusOr<ModelConfig> c =
      ParseModelConfig(ConfigJson(MambaJson(), {{"kind", "none"}}).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t base = 4 * 4 * 5;
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.5f);
  EXPECT_TRUE(ValidateSessionState(*c, 10, state, 1e18f).ok());
  const auto error = [&] {
    return std::string(ValidateSessionState(*c, 10, state, 1e18f).message());
  };
  state[static_cast<size_t>(base + 6 + 2 * 2 + 1)] = std::nanf("");
  EXPECT_THAT(error(), HasSubstr("(layer 1, head 1, S[2][1]): nan is not finite"));
  state[static_cast<size_t>(base + 6 + 2 * 2 + 1)] = 0.5f;
  state[static_cast<size_t>(base + 24 + 2 * 14 + 8 + 3 + 1)] = INFINITY;
  EXPECT_THAT(error(), HasSubstr("(layer 1, C of token t-0 (history row 2), channel 1): inf"));
}

}  // namespace
}  // namespace linserve
