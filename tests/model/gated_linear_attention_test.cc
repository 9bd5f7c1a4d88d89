// The gated linear-attention mixers (gated_linear_attention, retention) on the CPU: their
// parameters, tensors and state checks; the component against GLA, and RetNet's retention with
// RoPE at absolute positions, written out here in double; prefill in pieces (the chunked form)
// against token-by-token steps, gates strong enough to empty the state, a batch against each slot
// alone, a state exported and imported, and a model mixing them with linear_attention. Parity with
// the PyTorch reference is golden_test's, with fla's code test_convert_fla's.
#include "model/layers/gated_linear_attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
#include "model/layers/retention.h"
#include "model/layers/rms_norm.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cpu_mixer_harness.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kDModel = 16;

GatedLinearAttentionParams Gla() {
  return {.n_heads = 2, .head_k_dim = 8, .head_v_dim = 6, .gate_low_rank_dim = 4};
}

GatedLinearAttentionParams GlaWithConv() {
  GatedLinearAttentionParams p = Gla();
  p.use_short_conv = true;
  p.conv_size = 3;
  p.conv_bias = true;
  return p;
}

LayerSpec Layer(ComponentSpec mixer) {
  return {.mixer = std::move(mixer),
          .norm = {RmsNormKind().name, RmsNormParams{}.ToValues()},
          .mlp = {GatedMlpKind().name, GatedMlpParams{.d_ff = 24}.ToValues()}};
}

ComponentSpec GlaMixer(const GatedLinearAttentionParams& p) {
  return {GatedLinearAttentionKind().name, p.ToValues()};
}

RetentionParams Ret() { return {.n_heads = 2, .head_k_dim = 8, .head_v_dim = 6}; }

RetentionParams RetWithConv() {
  RetentionParams p = Ret();
  p.use_short_conv = true;
  p.conv_size = 3;
  p.conv_bias = true;
  p.rope_base = 500;
  return p;
}

ComponentSpec RetMixer(const RetentionParams& p) { return {RetentionKind().name, p.ToValues()}; }

GatedLinearAttentionShape ShapeOf(const ComponentSpec& mixer) {
  return mixer.kind == RetentionKind().name
             ? RetentionParams::From(mixer.params).Shape()
             : GatedLinearAttentionParams::From(mixer.params).Shape();
}

ComponentSpec LinearMixer() {
  return {LinearAttentionKind().name,
          LinearAttentionParams{.n_heads = 2, .head_dim = 8, .feature_dim = 8}.ToValues()};
}

// A byte-tokenizer model of these layers, through config.json text.
ModelConfig LayersConfig(const std::vector<LayerSpec>& layers) {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = kDModel;
  c.eos_token_id = 257;
  c.position = PositionEmbedding::kNone;
  c.tie_embeddings = false;
  c.n_layers = static_cast<int32_t>(layers.size());
  c.layers = layers;
  c.final_norm = {RmsNormKind().name, RmsNormParams{}.ToValues()};
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "LayersConfig");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *std::move(parsed) : c;
}

// The mixer of a one-layer model alone on the CPU, over `slots` sessions' state slices.
struct Mixer : CpuMixerHarness {
  // `edit` changes the random weights before the layer is built.
  Mixer(const ComponentSpec& mixer, int slots, uint64_t seed, int chunk = 64,
        const std::function<void(LayerWeights&)>& edit = nullptr)
      : CpuMixerHarness(LayersConfig({Layer(mixer)}), slots, seed, chunk, /*max_rows=*/160, edit) {}
};

// ---- GLA in double, from the layer's tensors ----

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<double> Project(const Tensor& w, const double* x) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) y[o] += static_cast<double>(w.data[o * in + i]) * x[i];
  }
  return y;
}

// Token t's vector x (k_dim) turned by RoPE at position t: pairs (c, c + k_dim/2) by
// t · base^(−2c/k_dim).
std::vector<double> Rope(const std::vector<double>& x, int t, double base) {
  const size_t half = x.size() / 2;
  std::vector<double> y(x.size());
  for (size_t c = 0; c < half; ++c) {
    const double angle = t * std::pow(base, -2.0 * static_cast<double>(c) / x.size());
    y[c] = x[c] * std::cos(angle) - x[c + half] * std::sin(angle);
    y[c + half] = x[c + half] * std::cos(angle) + x[c] * std::sin(angle);
  }
  return y;
}

// The mixer's output rows (d_model each, o_proj included) for rows `x` from the zero state: GLA
// by its recurrence, retention as fla's sum over positions with RoPE at absolute positions (not
// the state's turned frame the backends keep).
std::vector<double> Reference(const GatedLinearAttentionShape& p, const LayerWeights& w,
                              absl::Span<const float> x) {
  const int64_t kd = p.KeyDim(), vd = p.ValueDim(), hk = p.k_dim, hv = p.v_dim;
  const bool low_rank = p.gate == GatedLinearAttentionShape::Gate::kLowRank;
  const int rows = static_cast<int>(x.size() / kDModel);
  std::vector<std::vector<double>> raw;      // q | k | v before the convolutions, per row
  std::vector<std::vector<double>> history;  // retention: q | k | v per row
  std::vector<double> s(static_cast<size_t>(p.HistoryOffset()), 0.0);
  std::vector<double> out;
  for (int t = 0; t < rows; ++t) {
    const std::vector<double> xt(x.begin() + t * kDModel, x.begin() + (t + 1) * kDModel);
    std::vector<double> r = Project(w.At("attn.q_proj.weight"), xt.data());
    for (const char* name : {"attn.k_proj.weight", "attn.v_proj.weight"}) {
      const std::vector<double> part = Project(w.At(name), xt.data());
      r.insert(r.end(), part.begin(), part.end());
    }
    raw.push_back(r);
    std::vector<double> qkv = r;
    if (p.short_conv) {
      for (int64_t c = 0; c < static_cast<int64_t>(r.size()); ++c) {
        const char* which = c < kd ? "q" : c < 2 * kd ? "k" : "v";
        const int64_t ch = c < kd ? c : c < 2 * kd ? c - kd : c - 2 * kd;
        const Tensor& taps = w.At(absl::StrCat("attn.", which, "_conv1d.weight"));
        double acc = 0;
        for (int j = 0; j < p.conv_size; ++j) {
          const int src = t - (p.conv_size - 1) + j;
          if (src >= 0) acc += taps.data[ch * p.conv_size + j] * raw[src][c];
        }
        if (p.conv_bias) acc += w.At(absl::StrCat("attn.", which, "_conv1d.bias")).data[ch];
        qkv[c] = acc * Sigmoid(acc);
      }
    }
    history.push_back(qkv);
    std::vector<double> logit;
    if (low_rank) {
      const std::vector<double> low = Project(w.At("attn.gk_proj.0.weight"), xt.data());
      logit = Project(w.At("attn.gk_proj.1.weight"), low.data());
    }
    std::vector<double> gate;
    if (p.output_gate) gate = Project(w.At("attn.g_proj.weight"), xt.data());
    std::vector<double> o_all(static_cast<size_t>(vd));
    for (int64_t h = 0; h < p.heads; ++h) {
      if (low_rank) {
        double* sh = s.data() + h * hk * hv;
        for (int64_t i = 0; i < hk; ++i) {
          const int64_t c = h * hk + i;
          const double z = logit[c] + w.At("attn.gk_proj.1.bias").data[c];
          const double gk = std::max(std::log(Sigmoid(z)) / p.normalizer, p.clamp_min);
          for (int64_t j = 0; j < hv; ++j) {
            sh[i * hv + j] = sh[i * hv + j] * std::exp(gk) + qkv[kd + c] * qkv[2 * kd + h * hv + j];
          }
        }
        for (int64_t j = 0; j < hv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < hk; ++i) {
            o += sh[i * hv + j] * qkv[h * hk + i] / std::sqrt(static_cast<double>(hk));
          }
          o_all[h * hv + j] = o;
        }
      } else {
        const double gamma = 1.0 - std::exp2(-5.0 - static_cast<double>(h));
        const std::vector<double> q =
            Rope({qkv.begin() + h * hk, qkv.begin() + (h + 1) * hk}, t, p.rope_base);
        for (int src = 0; src <= t; ++src) {
          const std::vector<double>& past = history[static_cast<size_t>(src)];
          const std::vector<double> k = Rope(
              {past.begin() + kd + h * hk, past.begin() + kd + (h + 1) * hk}, src, p.rope_base);
          double score = 0;
          for (int64_t i = 0; i < hk; ++i) score += q[i] * k[i];
          score *= std::pow(gamma, t - src) / std::sqrt(static_cast<double>(hk));
          for (int64_t j = 0; j < hv; ++j) o_all[h * hv + j] += score * past[2 * kd + h * hv + j];
        }
      }
      double sum_sq = 0;
      for (int64_t j = 0; j < hv; ++j) sum_sq += o_all[h * hv + j] * o_all[h * hv + j];
      const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(hv) + p.norm_eps);
      for (int64_t j = 0; j < hv; ++j) {
        double y = o_all[h * hv + j] * inv * w.At("attn.g_norm.weight").data[j];
        if (p.output_gate) y *= gate[h * hv + j] * Sigmoid(gate[h * hv + j]);
        o_all[h * hv + j] = y;
      }
    }
    const std::vector<double> y = Project(w.At("attn.o_proj.weight"), o_all.data());
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

// The component gives the layer written out above, by steps and by one prefill, for every switch:
// the short convolutions with and without biases, the output gate on and off, another normaliser
// and a clamp that binds (GLA); RetNet's decay and RoPE with and without the convolutions and
// another base (retention).
TEST(GatedLinearAttentionTest, StepsAndPrefillAreTheLayer) {
  GatedLinearAttentionParams ungated = GlaWithConv();
  ungated.use_output_gate = false;
  ungated.conv_bias = false;
  GatedLinearAttentionParams clamped = Gla();
  clamped.gate_logit_normalizer = 1;
  clamped.clamp_min = -0.5;
  RetentionParams ret_ungated = Ret();
  ret_ungated.use_output_gate = false;
  for (const ComponentSpec& mixer :
       {GlaMixer(Gla()), GlaMixer(GlaWithConv()), GlaMixer(ungated), GlaMixer(clamped),
        RetMixer(Ret()), RetMixer(RetWithConv()), RetMixer(ret_ungated)}) {
    SCOPED_TRACE(ModelConfigToJson(LayersConfig({Layer(mixer)})));
    const std::vector<float> x = RandomRows(kDModel, 90, 3);
    Mixer steps(mixer, 1, 5);
    Mixer prefill(mixer, 1, 5);
    const std::vector<double> want = Reference(ShapeOf(mixer), steps.model.weights.layers[0], x);
    EXPECT_LE(RelativeError(steps.Steps(0, x), want), 1e-5);
    EXPECT_LE(RelativeError(prefill.Prefill(0, x), want), 1e-5);
  }
}

// The check above can fail: another normaliser, no clamp where one binds, or no convolution
// where the layer has one gives other outputs.
TEST(GatedLinearAttentionTest, TheDirectCheckSeesTheGateAndTheConvolutions) {
  const std::vector<float> x = RandomRows(kDModel, 30, 3);
  GatedLinearAttentionParams clamped = Gla();
  clamped.gate_logit_normalizer = 1;
  clamped.clamp_min = -0.5;
  Mixer layer(GlaMixer(clamped), 1, 5);
  const LayerWeights& w = layer.model.weights.layers[0];
  const std::vector<float> got = layer.Steps(0, x);
  EXPECT_LE(RelativeError(got, Reference(clamped.Shape(), w, x)), 1e-5);
  GatedLinearAttentionParams wrong = clamped;
  wrong.gate_logit_normalizer = 16;
  EXPECT_GT(RelativeError(got, Reference(wrong.Shape(), w, x)), 1e-2);
  wrong = clamped;
  wrong.clamp_min = kGlaMinLogGate;
  EXPECT_GT(RelativeError(got, Reference(wrong.Shape(), w, x)), 1e-2);
  Mixer conv(GlaMixer(GlaWithConv()), 1, 5);
  wrong = GlaWithConv();
  wrong.use_short_conv = false;
  EXPECT_GT(
      RelativeError(conv.Steps(0, x), Reference(wrong.Shape(), conv.model.weights.layers[0], x)),
      1e-2);
  // Retention: another RoPE base gives other outputs, and so does its decay without the turn.
  Mixer ret(RetMixer(Ret()), 1, 5);
  const std::vector<float> ret_got = ret.Steps(0, x);
  EXPECT_LE(RelativeError(ret_got, Reference(Ret().Shape(), ret.model.weights.layers[0], x)), 1e-5);
  GatedLinearAttentionShape ret_wrong = Ret().Shape();
  ret_wrong.rope_base = 100;
  EXPECT_GT(RelativeError(ret_got, Reference(ret_wrong, ret.model.weights.layers[0], x)), 1e-2);
  ret_wrong = Ret().Shape();
  ret_wrong.rope_base = 1e300;  // θ_c = 0 beyond c = 0: nearly no turn
  EXPECT_GT(RelativeError(ret_got, Reference(ret_wrong, ret.model.weights.layers[0], x)), 1e-2);
}

// Prefill in pieces of 1, 7, 64 and 150 tokens (chunks of 64: the chunked form, blocks of 16
// inside; a chunk boundary anywhere against the convolutions' history) gives the steps' outputs
// and state up to rounding (relative 1e-5), and bitwise where every chunk is one token.
TEST(GatedLinearAttentionTest, PrefillInPiecesEqualsTheSteps) {
  for (const ComponentSpec& mixer :
       {GlaMixer(Gla()), GlaMixer(GlaWithConv()), RetMixer(Ret()), RetMixer(RetWithConv())}) {
    SCOPED_TRACE(mixer.params.Bool("use_short_conv") ? mixer.kind + " with short convolutions"
                                                     : mixer.kind);
    const std::vector<float> x = RandomRows(kDModel, 150, 7);
    Mixer steps(mixer, 1, 9);
    const std::vector<float> want = steps.Steps(0, x);
    for (const auto& [piece, chunk] : std::vector<std::pair<int, int>>{
             {1, 64}, {7, 64}, {64, 64}, {150, 64}, {150, 1}, {150, 7}, {150, 150}}) {
      SCOPED_TRACE(absl::StrCat("pieces of ", piece, ", chunks of ", chunk));
      Mixer chunked(mixer, 1, 9, chunk);
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

// Gates that empty the state (a logit of −1e9: gk at the floor −1e4 per token; −1e3: gk −62.5)
// on some channels: the chunked form, whose exponents are differences of cumulative gates, gives
// the steps' finite outputs and state.
TEST(GatedLinearAttentionTest, GatesThatEmptyTheStateGiveTheStepsInPrefill) {
  const auto strong = [](LayerWeights& w) {
    std::vector<float>& bias = w.tensors.at("attn.gk_proj.1.bias").data;
    bias[0] = -1e9f;
    bias[3] = -1e3f;
    bias[9] = -1e9f;
  };
  const std::vector<float> x = RandomRows(kDModel, 100, 11);
  Mixer steps(GlaMixer(Gla()), 1, 9, 64, strong);
  Mixer prefill(GlaMixer(Gla()), 1, 9, 64, strong);
  const std::vector<float> want = steps.Steps(0, x);
  const std::vector<float> got = prefill.Prefill(0, x);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  for (float v : prefill.State(0)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(RelativeError(got, ToDouble(want)), 1e-5);
  EXPECT_LE(RelativeError(prefill.State(0), ToDouble(steps.State(0))), 1e-5);
  // Channel 0's row of head 0 holds the last token's k v only, as a session of that token alone
  // (the layer has no convolutions) has it.
  Mixer last(GlaMixer(Gla()), 1, 9, 64, strong);
  last.Steps(0, absl::MakeConstSpan(x).subspan(99 * kDModel, kDModel));
  for (int j = 0; j < Gla().head_v_dim; ++j) {
    EXPECT_EQ(prefill.State(0)[static_cast<size_t>(j)], last.State(0)[static_cast<size_t>(j)]);
  }
}

// One decode pass over several slots, each with its own history, gives bitwise what each slot's
// step gives alone.
TEST(GatedLinearAttentionTest, ABatchOfSlotsStepsEachAsAlone) {
  Mixer batched(GlaMixer(GlaWithConv()), 3, 4);
  Mixer alone(GlaMixer(GlaWithConv()), 3, 4);
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

ModelConfig MixedConfig() {
  GatedLinearAttentionParams wide = Gla();
  wide.head_v_dim = 16;
  wide.use_output_gate = false;
  return LayersConfig({Layer(GlaMixer(Gla())), Layer(LinearMixer()), Layer(GlaMixer(GlaWithConv())),
                       Layer(GlaMixer(wide)), Layer(RetMixer(RetWithConv()))});
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

// A model of gated_linear_attention, linear_attention and retention layers gives the same logits
// and state by prefill in chunks of 1, 7, 64 and 150 as by steps (bitwise state with chunk 1), and
// a valid state.
TEST(GatedLinearAttentionTest, AMixedModelGivesTheSameLogitsByPrefillAndBySteps) {
  const ModelConfig config = MixedConfig();
  const Model model = MakeRandomModel(config, 17);
  const std::vector<TokenId> tokens = Tokens(150);
  const int64_t vocab = config.vocab_size;
  std::unique_ptr<Backend> recurrent = Cpu(model, 64);
  const SlotId r = *recurrent->AllocateSlot();
  std::vector<float> step_logits(tokens.size() * vocab);
  for (size_t t = 0; t < tokens.size(); ++t) {
    const DecodeItem item{r, tokens[t]};
    ASSERT_TRUE(
        recurrent->Decode({&item, 1}, absl::MakeSpan(step_logits).subspan(t * vocab, vocab)).ok());
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
    EXPECT_EQ(got.position, want.position);
    EXPECT_LE(RelativeError(got.state, ToDouble(want.state)), 1e-5);
    EXPECT_LE(RelativeError(logits, ToDouble(step_logits)), 1e-4);
    if (chunk == 1) {
      EXPECT_EQ(got.state, want.state);
    }
    EXPECT_TRUE(ValidateSessionState(config, got.position, got.state, 1e18f).ok());
  }
}

// A state read out, written into another backend's slot (an export and import) and a copied
// slot (a fork) continue exactly as the session they came from.
TEST(GatedLinearAttentionTest, ExportedImportedAndForkedStatesContinueExactly) {
  const Model model = MakeRandomModel(MixedConfig(), 19);
  const int64_t vocab = model.config.vocab_size;
  const std::vector<TokenId> tokens = Tokens(40);
  std::unique_ptr<Backend> a = Cpu(model, 16);
  std::unique_ptr<Backend> b = Cpu(model, 16);
  const SlotId from = *a->AllocateSlot();
  ASSERT_TRUE(a->Prefill(from, tokens, {}).ok());
  StateBlob blob;
  ASSERT_TRUE(a->ReadSlot(from, blob).ok());
  ASSERT_TRUE(ValidateSessionState(model.config, blob.position, blob.state, 1e18f).ok());
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

nlohmann::json GlaJson() {
  return {{"kind", "gated_linear_attention"}, {"n_heads", 2}, {"head_k_dim", 4}, {"head_v_dim", 6}};
}

nlohmann::json ConfigJson(const nlohmann::json& mixer) {
  return {{"vocab_size", 260},
          {"d_model", 16},
          {"layers",
           {{{"mixer", {{"kind", "linear_attention"}, {"n_heads", 4}, {"head_dim", 4}}},
             {"norm", {{"kind", "layer_norm"}}},
             {"mlp", {{"kind", "ffn"}, {"d_ff", 32}}}},
            {{"mixer", mixer},
             {"norm", {{"kind", "rms_norm"}}},
             {"mlp", {{"kind", "gated_mlp"}, {"d_ff", 32}}}}}}};
}

std::string ParseError(const nlohmann::json& j) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump(), "config.json");
  EXPECT_FALSE(c.ok()) << "accepted " << j.dump();
  return c.ok() ? "" : std::string(c.status().message());
}

std::string TensorNames(const GatedLinearAttentionParams& p) {
  std::vector<std::string> out;
  for (const TensorDecl& t : GatedLinearAttentionKind().tensors(p.ToValues(), 16)) {
    out.push_back(absl::StrCat(t.name, absl::StrJoin(t.shape, "x")));
  }
  return absl::StrJoin(out, " ");
}

TEST(GatedLinearAttentionTest, ConfigDefaultsStateSizeAndTensors) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(GlaJson()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  GatedLinearAttentionParams p = GatedLinearAttentionParams::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.gate_low_rank_dim, 16);
  EXPECT_EQ(p.gate_logit_normalizer, 16);
  EXPECT_EQ(p.clamp_min, -1e4);
  EXPECT_FALSE(p.use_short_conv);
  EXPECT_EQ(p.conv_size, 4);
  EXPECT_FALSE(p.conv_bias);
  EXPECT_TRUE(p.use_output_gate);
  EXPECT_EQ(p.norm_eps, 1e-5);
  // S: 2 heads × 4 × 6, no history without the convolutions.
  const int64_t linear = 4 * 4 * 5;
  EXPECT_EQ(c->StateFloatsPerSlot(), linear + 2 * 4 * 6);
  EXPECT_EQ(TensorNames(p),
            "attn.q_proj.weight8x16 attn.k_proj.weight8x16 attn.v_proj.weight12x16 "
            "attn.gk_proj.0.weight16x16 attn.g_proj.weight12x16 attn.gk_proj.1.weight8x16 "
            "attn.gk_proj.1.bias8 attn.g_norm.weight6 attn.o_proj.weight16x12");
  p.use_short_conv = true;
  p.conv_bias = true;
  p.use_output_gate = false;
  p.gate_low_rank_dim = 2;
  EXPECT_EQ(TensorNames(p),
            "attn.q_proj.weight8x16 attn.k_proj.weight8x16 attn.v_proj.weight12x16 "
            "attn.gk_proj.0.weight2x16 attn.gk_proj.1.weight8x2 attn.gk_proj.1.bias8 "
            "attn.q_conv1d.weight8x4 attn.q_conv1d.bias8 attn.k_conv1d.weight8x4 "
            "attn.k_conv1d.bias8 attn.v_conv1d.weight12x4 attn.v_conv1d.bias12 "
            "attn.g_norm.weight6 attn.o_proj.weight16x12");
  // With the convolutions: 3 history rows of q (8) | k (8) | v (12).
  nlohmann::json mixer = GlaJson();
  mixer["use_short_conv"] = true;
  c = ParseModelConfig(ConfigJson(mixer).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->StateFloatsPerSlot(), linear + 2 * 4 * 6 + 3 * 28);
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers, c->layers);
}

// retention: its defaults, the state of heads × k × v, and its tensors (no gk_proj); an odd
// head_k_dim (RoPE turns pairs) and GLA's gate parameters are refused.
TEST(GatedLinearAttentionTest, RetentionConfigDefaultsStateSizeAndTensors) {
  const nlohmann::json mixer = {
      {"kind", "retention"}, {"n_heads", 2}, {"head_k_dim", 4}, {"head_v_dim", 6}};
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(mixer).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  RetentionParams p = RetentionParams::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.rope_base, 10000);
  EXPECT_FALSE(p.use_short_conv);
  EXPECT_TRUE(p.use_output_gate);
  EXPECT_EQ(p.norm_eps, 1e-5);
  EXPECT_EQ(c->StateFloatsPerSlot(), 4 * 4 * 5 + 2 * 4 * 6);
  std::vector<std::string> names;
  for (const TensorDecl& t : RetentionKind().tensors(p.ToValues(), 16)) names.push_back(t.name);
  EXPECT_EQ(absl::StrJoin(names, " "),
            "attn.q_proj.weight attn.k_proj.weight attn.v_proj.weight attn.g_proj.weight "
            "attn.g_norm.weight attn.o_proj.weight");
  nlohmann::json odd = mixer;
  odd["head_k_dim"] = 5;
  EXPECT_THAT(ParseError(ConfigJson(odd)),
              HasSubstr("field \"layers[1].mixer.head_k_dim\": must be even"));
  nlohmann::json gla = mixer;
  gla["gate_low_rank_dim"] = 16;
  EXPECT_THAT(ParseError(ConfigJson(gla)),
              HasSubstr("unknown field \"layers[1].mixer.gate_low_rank_dim\""));
}

TEST(GatedLinearAttentionTest, ConfigRefusalsNameTheField) {
  const auto with = [](const char* field, const nlohmann::json& value) {
    nlohmann::json mixer = GlaJson();
    mixer[field] = value;
    return ConfigJson(mixer);
  };
  EXPECT_THAT(ParseError(with("head_k_dim", 0)),
              HasSubstr("field \"layers[1].mixer.head_k_dim\": must be in [1, 1024]"));
  EXPECT_THAT(ParseError(with("gate_low_rank_dim", 2000)),
              HasSubstr("field \"layers[1].mixer.gate_low_rank_dim\": must be in [1, 1024]"));
  EXPECT_THAT(ParseError(with("gate_logit_normalizer", 0)),
              HasSubstr("field \"layers[1].mixer.gate_logit_normalizer\": must be in [1, 1e+06]"));
  EXPECT_THAT(ParseError(with("clamp_min", 0.5)),
              HasSubstr("field \"layers[1].mixer.clamp_min\": must be in [-10000, 0]"));
  EXPECT_THAT(ParseError(with("conv_size", 1)),
              HasSubstr("field \"layers[1].mixer.conv_size\": must be in [2, 64]"));
  EXPECT_THAT(ParseError(with("n_v_heads", 4)),
              HasSubstr("unknown field \"layers[1].mixer.n_v_heads\""));
  nlohmann::json mixer = GlaJson();
  mixer.erase("head_v_dim");
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.head_v_dim\": is required"));
}

// Weights missing a tensor the config asks for, holding one of the wrong shape, a NaN gate bias
// or a convolution the config does not have are refused naming the tensor.
TEST(GatedLinearAttentionTest, BadWeightsAreRefusedNamingTheTensor) {
  const ModelConfig config = MixedConfig();
  ModelWeights weights = MakeRandomWeights(config, 3);
  ASSERT_TRUE(ValidateWeights(config, weights).ok());
  ModelWeights missing = weights;
  missing.layers[0].tensors.erase("attn.gk_proj.1.bias");
  EXPECT_THAT(std::string(ValidateWeights(config, missing).message()),
              HasSubstr("layers.0.attn.gk_proj.1.bias"));
  ModelWeights shape = weights;
  shape.layers[2].tensors["attn.v_conv1d.weight"].shape = {12, 2};
  EXPECT_THAT(std::string(ValidateWeights(config, shape).message()),
              HasSubstr("layers.2.attn.v_conv1d.weight"));
  ModelWeights gate = weights;  // a NaN gate would reach every later token
  gate.layers[0].tensors["attn.gk_proj.1.bias"].data[1] = std::nanf("");
  EXPECT_THAT(std::string(ValidateWeights(config, gate).message()),
              testing::AllOf(HasSubstr("layers.0.attn.gk_proj.1.bias"), HasSubstr("finite")));
  ModelWeights conv = weights;  // layer 0 has no convolutions
  conv.layers[0].tensors["attn.q_conv1d.weight"] =
      weights.layers[2].tensors["attn.q_conv1d.weight"];
  EXPECT_THAT(std::string(ValidateWeights(config, conv).message()),
              HasSubstr("layers.0.attn.q_conv1d.weight"));
}

// Imported states: every value finite and within the bound; a bad one is located by head and S
// entry, or by history row and q/k/v channel.
TEST(GatedLinearAttentionTest, ImportedStatesWithBadValuesAreRefusedNamingWhere) {
  nlohmann::json mixer = GlaJson();
  mixer["use_short_conv"] = true;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(mixer).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t base = 4 * 4 * 5;  // layer 1's slice starts after layer 0's
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.5f);
  EXPECT_TRUE(ValidateSessionState(*c, 10, state, 1e18f).ok());
  const auto error = [&] {
    return std::string(ValidateSessionState(*c, 10, state, 1e18f).message());
  };
  state[static_cast<size_t>(base + 24 + 2 * 6 + 3)] = std::nanf("");
  EXPECT_THAT(error(), HasSubstr("(layer 1, head 1, S[2][3]): nan is not finite"));
  state[static_cast<size_t>(base + 24 + 2 * 6 + 3)] = 0.5f;
  state[static_cast<size_t>(base + 48 + 2 * 28 + 16 + 5)] = INFINITY;
  EXPECT_THAT(error(), HasSubstr("(layer 1, v of token t-0 (history row 2), channel 5): inf"));
}

}  // namespace
}  // namespace linserve
