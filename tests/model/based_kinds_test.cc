// The Based layer kinds on the CPU backend: rms_norm, gated_mlp, short_conv and
// taylor_linear_attention. Each component against a direct formula in double; a model mixing
// them with linear_attention: chunked prefill against the token-by-token recurrence, prefill
// split anywhere, state checks, config refusals and round trip, and the CUDA backend's refusal.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/elementwise.h"
#include "model/backend/backend.h"
#include "model/backend/cpu/cpu_layer.h"
#include "model/format/config.h"
#include "model/format/session_state.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/kinds.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear_attention.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/taylor_linear_attention.h"
#include "nlohmann/json.hpp"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

// ---- Configs ----

ComponentSpec RmsNorm() { return {RmsNormKind().name, RmsNormParams{.eps = 1e-5}.ToValues()}; }

ComponentSpec GatedMlp(int32_t d_ff, GateActivation act, bool bias) {
  return {GatedMlpKind().name,
          GatedMlpParams{.d_ff = d_ff, .activation = act, .bias = bias}.ToValues()};
}

ComponentSpec ShortConv(int32_t d_inner, int32_t kernel, bool bias, bool conv_bias) {
  return {ShortConvKind().name, ShortConvParams{.d_inner = d_inner,
                                                .kernel_size = kernel,
                                                .bias = bias,
                                                .conv_bias = conv_bias}
                                    .ToValues()};
}

ComponentSpec Taylor(int32_t heads, int32_t feature_dim, int32_t head_dim) {
  return {TaylorLinearAttentionKind().name,
          TaylorLinearAttentionParams{
              .n_heads = heads, .feature_dim = feature_dim, .head_dim = head_dim, .eps = 1e-12}
              .ToValues()};
}

LayerSpec BasedLayer(ComponentSpec mixer, ComponentSpec mlp) {
  return {.mixer = std::move(mixer), .norm = RmsNorm(), .mlp = std::move(mlp)};
}

// A byte-tokenizer model of `layers`, no positions, tied, an rms_norm final norm.
ModelConfig ConfigOf(int32_t d_model, std::vector<LayerSpec> layers) {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = d_model;
  c.eos_token_id = 257;
  c.position = PositionEmbedding::kNone;
  c.n_layers = static_cast<int32_t>(layers.size());
  c.layers = std::move(layers);
  c.final_norm = RmsNorm();
  return c;
}

// short_conv, taylor_linear_attention and linear_attention, with both norms and both MLPs.
ModelConfig MixedConfig() {
  LayerSpec linear{
      .mixer = {LinearAttentionKind().name,
                LinearAttentionParams{.n_heads = 2,
                                      .head_dim = 8,
                                      .feature_dim = 8,
                                      .feature_map = FeatureMap::kEluPlusOne,
                                      .eps = 1e-6,
                                      .bias = true}
                    .ToValues()},
      .norm = {LayerNormKind().name, LayerNormParams{.eps = 1e-5}.ToValues()},
      .mlp = {FfnKind().name,
              FfnParams{.d_ff = 32, .activation = Activation::kGelu, .bias = true}.ToValues()}};
  return ConfigOf(16, {BasedLayer(ShortConv(24, 3, true, true), GatedMlp(24, GateActivation::kSilu, false)),
                       BasedLayer(Taylor(2, 4, 8), GatedMlp(24, GateActivation::kSilu, false)),
                       linear,
                       BasedLayer(ShortConv(16, 4, false, false),
                                  GatedMlp(20, GateActivation::kGelu, true)),
                       BasedLayer(Taylor(1, 3, 16), GatedMlp(16, GateActivation::kSigmoid, true))});
}

// ---- Direct formulas, in double ----

using Vec = std::vector<double>;

// W x + b for W [out, in] (nn.Linear); b may be empty.
Vec Affine(const Tensor& w, const Tensor& b, const Vec& x) {
  const int64_t out = w.shape[0], in = w.shape[1];
  Vec y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double acc = b.empty() ? 0.0 : b.data[o];
    for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(w.data[o * in + i]) * x[i];
    y[o] = acc;
  }
  return y;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double Act(GateActivation act, double x) {
  switch (act) {
    case GateActivation::kSilu:
      return x * Sigmoid(x);
    case GateActivation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case GateActivation::kSigmoid:
      return Sigmoid(x);
  }
  return x;
}

// φ(x) = [1, x / d^¼, vec(x xᵀ) / (√2·√d)].
Vec TaylorPhi(const double* x, int d) {
  Vec phi = {1.0};
  for (int i = 0; i < d; ++i) phi.push_back(x[i] / std::pow(d, 0.25));
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) phi.push_back(x[i] * x[j] / (std::sqrt(2.0) * std::sqrt(d)));
  }
  return phi;
}

Vec ToDouble(const float* x, int64_t n) { return Vec(x, x + n); }

std::vector<float> RandomRows(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// max |got − want| over max |want|.
double RelativeError(absl::Span<const float> got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

double RelativeError(absl::Span<const float> got, absl::Span<const float> want) {
  return RelativeError(got, Vec(want.begin(), want.end()));
}

// ---- The CPU components of a one-layer model, driven directly ----

class OneLayer {
 public:
  static constexpr int kMaxRows = 16;

  explicit OneLayer(const ModelConfig& config, int chunk = 4)
      : model_(MakeRandomModel(config, 11)) {
    options_.prefill_chunk_size = chunk;
    options_.max_batch_size = 4;
    const CpuLayerContext context{.model = model_,
                                  .options = options_,
                                  .threads = 1,
                                  .max_rows = kMaxRows,
                                  .workspace = workspace_};
    layers_ = CreateCpuLayers(context);
    workspace_.Allocate();
    state_floats_ = config.StateFloatsPerSlot();
    states_.assign(static_cast<size_t>(state_floats_ * 4), 0.0f);
  }

  const LayerWeights& weights() const { return model_.weights.layers[0]; }
  const CpuLayer& layer() const { return layers_.layers[0]; }
  int64_t d_model() const { return model_.config.d_model; }
  absl::Span<float> state(int slot) {
    return absl::MakeSpan(states_).subspan(static_cast<size_t>(slot * state_floats_),
                                           static_cast<size_t>(state_floats_));
  }

  // The mixer's output for one token of `slot` (a decode pass of one row).
  std::vector<float> Decode(const float* x, int32_t slot) {
    std::vector<float> out(static_cast<size_t>(d_model()), 0.0f);
    const CpuPass pass{.rows = 1,
                       .prefill = false,
                       .pieces = {},
                       .decode_slots = {&slot, 1},
                       .states = states_.data(),
                       .state_floats = state_floats_};
    layers_.layers[0].mixer->Forward(x, pass, out.data());
    return out;
  }

  // The mixer's outputs for `rows` tokens of `slot` in one prefill piece.
  std::vector<float> Prefill(const float* x, int rows, int32_t slot) {
    std::vector<float> out(static_cast<size_t>(rows * d_model()), 0.0f);
    const PrefillPiece piece{.slot = slot, .first_row = 0, .rows = rows};
    const CpuPass pass{.rows = rows,
                       .prefill = true,
                       .pieces = {&piece, 1},
                       .decode_slots = {},
                       .states = states_.data(),
                       .state_floats = state_floats_};
    layers_.layers[0].mixer->Forward(x, pass, out.data());
    return out;
  }

 private:
  Model model_;
  BackendOptions options_;
  CpuWorkspace workspace_;
  CpuLayers layers_;
  int64_t state_floats_ = 0;
  std::vector<float> states_;
};

TEST(BasedKindsTest, TaylorFeatureMapAtTwoDimensions) {
  // d = 2: 1/d^¼ = 2^-¼, 1/(√2·√2) = 1/2.
  const float x[2] = {1.0f, -2.0f};
  float phi[7];
  cpu::TaylorFeatureMap(x, 1, 2, phi);
  const double r = std::pow(2.0, -0.25);
  const double want[7] = {1.0, 1.0 * r, -2.0 * r, 0.5, -1.0, -1.0, 2.0};
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(phi[i], want[i], 1e-6) << i;
  // φ(q)·φ(k) = 1 + q·k/√d + (q·k)²/(2d), the Taylor expansion of exp(q·k/√d) to second order.
  const float y[2] = {0.5f, 3.0f};
  float phi_y[7];
  cpu::TaylorFeatureMap(y, 1, 2, phi_y);
  double dot = 0.0;
  for (int i = 0; i < 7; ++i) dot += static_cast<double>(phi[i]) * phi_y[i];
  const double qk = 1.0 * 0.5 + -2.0 * 3.0;
  EXPECT_NEAR(dot, 1.0 + qk / std::sqrt(2.0) + qk * qk / 4.0, 1e-5);
}

TEST(BasedKindsTest, RmsNormIsTheFormula) {
  OneLayer m(ConfigOf(6, {BasedLayer(ShortConv(4, 3, true, true),
                                     GatedMlp(5, GateActivation::kSilu, false))}));
  const std::vector<float> x = RandomRows(3 * 6, 1);
  std::vector<float> y(x.size());
  m.layer().norm1->Apply(x.data(), 3, y.data());
  const Tensor& g = m.weights().At("ln1.weight");
  Vec want;
  for (int r = 0; r < 3; ++r) {
    double sq = 0.0;
    for (int i = 0; i < 6; ++i) sq += static_cast<double>(x[r * 6 + i]) * x[r * 6 + i];
    const double rstd = 1.0 / std::sqrt(sq / 6 + 1e-5);
    for (int i = 0; i < 6; ++i) want.push_back(x[r * 6 + i] * rstd * g.data[i]);
  }
  EXPECT_LE(RelativeError(y, want), 1e-6);
}

TEST(BasedKindsTest, GatedMlpIsTheFormulaFirstHalfValueSecondHalfGate) {
  for (GateActivation act :
       {GateActivation::kSilu, GateActivation::kGelu, GateActivation::kSigmoid}) {
    SCOPED_TRACE(std::string(ToString(act)));
    OneLayer m(ConfigOf(6, {BasedLayer(ShortConv(4, 3, true, true), GatedMlp(5, act, true))}));
    const std::vector<float> x = RandomRows(2 * 6, 2);
    std::vector<float> residual = RandomRows(2 * 6, 3);
    const std::vector<float> before = residual;
    m.layer().mlp->Forward(x.data(), 2, residual.data());
    const LayerWeights& w = m.weights();
    Vec want;
    for (int r = 0; r < 2; ++r) {
      const Vec a = Affine(w.FindOrEmpty("mlp.fc1.weight"), w.FindOrEmpty("mlp.fc1.bias"),
                           ToDouble(x.data() + r * 6, 6));
      Vec h(5);
      for (int i = 0; i < 5; ++i) h[i] = a[i] * Act(act, a[5 + i]);
      const Vec y = Affine(w.FindOrEmpty("mlp.fc2.weight"), w.FindOrEmpty("mlp.fc2.bias"), h);
      for (int i = 0; i < 6; ++i) want.push_back(before[r * 6 + i] + y[i]);
    }
    EXPECT_LE(RelativeError(residual, want), 1e-5);
  }
}

// c_t = Σ_j w[j] u_{t−(K−1)+j} + b over a zero-padded past, out_proj(silu(c) ⊙ g); the state is
// the last K − 1 u's, oldest first; a prefill piece gives bitwise the decode steps' outputs and
// state.
TEST(BasedKindsTest, ShortConvIsTheFormula) {
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias);
    const int d = 6, di = 4, k = 3, tokens = 6;
    OneLayer m(ConfigOf(d, {BasedLayer(ShortConv(di, k, bias, bias),
                                       GatedMlp(5, GateActivation::kSilu, false))}));
    const LayerWeights& w = m.weights();
    const std::vector<float> x = RandomRows(tokens * d, 4);
    std::vector<Vec> us;
    for (int t = 0; t < tokens; ++t) {
      SCOPED_TRACE(t);
      const Vec a = Affine(w.FindOrEmpty("conv.in_proj.weight"), w.FindOrEmpty("conv.in_proj.bias"),
                           ToDouble(x.data() + t * d, d));
      us.emplace_back(a.begin(), a.begin() + di);
      Vec gated(di);
      for (int ch = 0; ch < di; ++ch) {
        double c = bias ? w.FindOrEmpty("conv.bias").data[ch] : 0.0;
        for (int j = 0; j < k; ++j) {
          const int s = t - (k - 1) + j;
          if (s >= 0)
            c += static_cast<double>(w.FindOrEmpty("conv.weight").data[ch * k + j]) * us[s][ch];
        }
        gated[ch] = c * Sigmoid(c) * a[di + ch];
      }
      const Vec want =
          Affine(w.FindOrEmpty("conv.out_proj.weight"), w.FindOrEmpty("conv.out_proj.bias"), gated);
      EXPECT_LE(RelativeError(m.Decode(x.data() + t * d, 0), want), 1e-5);
      Vec state;
      for (int r = 0; r < k - 1; ++r) {
        const int s = t - (k - 2) + r;
        for (int ch = 0; ch < di; ++ch) state.push_back(s >= 0 ? us[s][ch] : 0.0);
      }
      EXPECT_LE(RelativeError(m.state(0), state), 1e-6);
    }
    std::vector<float> decoded;
    for (int t = 0; t < tokens; ++t) {
      const std::vector<float> y = m.Decode(x.data() + t * d, 1);
      decoded.insert(decoded.end(), y.begin(), y.end());
    }
    EXPECT_EQ(m.Prefill(x.data(), tokens, 2), decoded);
    EXPECT_TRUE(std::ranges::equal(m.state(2), m.state(1)));
  }
}

// Per head S += φ(k)vᵀ, z += φ(k) (the current token first), out φ(q)ᵀS / (φ(q)ᵀz + eps), the
// state S then z per head; a prefill of chunks of 4 leaves the same up to rounding.
TEST(BasedKindsTest, TaylorLinearAttentionIsTheFormula) {
  const int d = 8, heads = 2, df = 2, hd = 3, tokens = 7;
  const int features = 1 + df + df * df;
  OneLayer m(ConfigOf(d, {BasedLayer(Taylor(heads, df, hd),
                                     GatedMlp(5, GateActivation::kSilu, false))}),
             /*chunk=*/4);
  const LayerWeights& w = m.weights();
  const std::vector<float> x = RandomRows(tokens * d, 5);
  const Tensor none;
  std::vector<Vec> s(heads, Vec(features * hd, 0.0)), z(heads, Vec(features, 0.0));
  Vec all_want;
  std::vector<float> all_got;
  for (int t = 0; t < tokens; ++t) {
    SCOPED_TRACE(t);
    const Vec in = ToDouble(x.data() + t * d, d);
    const Vec q = Affine(w.FindOrEmpty("attn.q_proj.weight"), none, in),
              k = Affine(w.FindOrEmpty("attn.k_proj.weight"), none, in),
              v = Affine(w.FindOrEmpty("attn.v_proj.weight"), none, in);
    Vec y(heads * hd);
    for (int h = 0; h < heads; ++h) {
      const Vec pq = TaylorPhi(q.data() + h * df, df), pk = TaylorPhi(k.data() + h * df, df);
      for (int f = 0; f < features; ++f) {
        for (int j = 0; j < hd; ++j) s[h][f * hd + j] += pk[f] * v[h * hd + j];
        z[h][f] += pk[f];
      }
      double den = 1e-12;
      for (int f = 0; f < features; ++f) den += pq[f] * z[h][f];
      for (int j = 0; j < hd; ++j) {
        double num = 0.0;
        for (int f = 0; f < features; ++f) num += pq[f] * s[h][f * hd + j];
        y[h * hd + j] = num / den;
      }
    }
    const Vec want = Affine(w.FindOrEmpty("attn.o_proj.weight"), none, y);
    const std::vector<float> got = m.Decode(x.data() + t * d, 0);
    EXPECT_LE(RelativeError(got, want), 1e-5);
    all_want.insert(all_want.end(), want.begin(), want.end());
    all_got.insert(all_got.end(), got.begin(), got.end());
  }
  Vec state;
  for (int h = 0; h < heads; ++h) {
    state.insert(state.end(), s[h].begin(), s[h].end());
    state.insert(state.end(), z[h].begin(), z[h].end());
  }
  EXPECT_LE(RelativeError(m.state(0), state), 1e-6);
  EXPECT_EQ(m.state(0)[features * hd], tokens);  // z[0] of head 0 counts the tokens
  // Chunks 4 + 3 of one piece.
  EXPECT_LE(RelativeError(m.Prefill(x.data(), tokens, 1), all_want), 1e-5);
  EXPECT_LE(RelativeError(m.state(1), state), 1e-6);
}

// ---- Whole models on the CPU backend ----

std::unique_ptr<Backend> MakeBackend(const Model& model, int chunk) {
  BackendOptions options;
  options.prefill_chunk_size = chunk;
  options.num_threads = 2;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateCpuBackend(model, options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? *std::move(b) : nullptr;
}

std::vector<TokenId> Tokens(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (TokenId& x : t) x = static_cast<TokenId>(rng() % 256);
  return t;
}

StateBlob Read(const Backend& b, SlotId slot) {
  StateBlob blob;
  EXPECT_TRUE(b.ReadSlot(slot, blob).ok());
  return blob;
}

// Chunked prefill (chunks 1, 7, 64 over 150 tokens) leaves the state of feeding the tokens one
// at a time (relative error ≤ 1e-5: the chunked linear attentions sum in another order) with
// the same every-position logits (≤ 1e-4); one-token chunks are the decode path, bitwise; the
// bottom short_conv layer's slice, ahead of any reordered sum, is bitwise equal for every chunk.
TEST(BasedKindsTest, ChunkedPrefillEqualsRecurrenceOnAMixedModel) {
  const ModelConfig config = MixedConfig();
  const Model model = MakeRandomModel(config, 7);
  const int kTokens = 150;
  const int vocab = config.vocab_size;
  const std::vector<TokenId> tokens = Tokens(kTokens, 1);
  std::unique_ptr<Backend> recurrent = MakeBackend(model, 64);
  const SlotId r = *recurrent->AllocateSlot();
  std::vector<float> step_logits(static_cast<size_t>(kTokens) * vocab);
  for (int t = 0; t < kTokens; ++t) {
    const DecodeItem item{r, tokens[t]};
    ASSERT_TRUE(recurrent
                    ->Decode({&item, 1}, absl::MakeSpan(step_logits).subspan(
                                             static_cast<size_t>(t) * vocab, vocab))
                    .ok());
  }
  const StateBlob expect = Read(*recurrent, r);
  const int64_t conv_floats = config.StateOffsets()[1];
  for (int chunk : {1, 7, 64}) {
    SCOPED_TRACE(chunk);
    std::unique_ptr<Backend> chunked = MakeBackend(model, chunk);
    const SlotId s = *chunked->AllocateSlot();
    std::vector<float> logits(step_logits.size());
    ASSERT_TRUE(chunked->Prefill(s, tokens, absl::MakeSpan(logits)).ok());
    const StateBlob got = Read(*chunked, s);
    EXPECT_EQ(got.position, kTokens);
    EXPECT_LE(RelativeError(got.state, expect.state), 1e-5);
    EXPECT_LE(RelativeError(logits, step_logits), 1e-4);
    EXPECT_TRUE(std::equal(got.state.begin(), got.state.begin() + conv_floats,
                           expect.state.begin()));
    if (chunk == 1) {
      EXPECT_EQ(got.state, expect.state);
      EXPECT_EQ(logits, step_logits);
    }
  }
}

// A prompt prefilled in two calls, split anywhere, leaves the state of one call (up to the
// chunked sums' rounding) and the same last logits.
TEST(BasedKindsTest, PrefillSplitAnywhereContinuesWhereItStopped) {
  const Model model = MakeRandomModel(MixedConfig(), 9);
  const int vocab = model.config.vocab_size;
  const std::vector<TokenId> tokens = Tokens(40, 2);
  std::unique_ptr<Backend> b = MakeBackend(model, 8);
  const SlotId whole = *b->AllocateSlot();
  std::vector<float> last_whole(static_cast<size_t>(vocab));
  ASSERT_TRUE(b->Prefill(whole, tokens, absl::MakeSpan(last_whole)).ok());
  const StateBlob expect = Read(*b, whole);
  for (int split : {1, 2, 3, 7, 8, 9, 39}) {
    SCOPED_TRACE(split);
    const SlotId s = *b->AllocateSlot();
    const absl::Span<const TokenId> all(tokens);
    std::vector<float> last(static_cast<size_t>(vocab));
    ASSERT_TRUE(b->Prefill(s, all.subspan(0, split), {}).ok());
    ASSERT_TRUE(b->Prefill(s, all.subspan(split), absl::MakeSpan(last)).ok());
    const StateBlob got = Read(*b, s);
    EXPECT_EQ(got.position, 40);
    EXPECT_LE(RelativeError(got.state, expect.state), 1e-5);
    EXPECT_LE(RelativeError(last, last_whole), 1e-4);
    b->FreeSlot(s);
  }
}

// ---- Config ----

TEST(BasedKindsTest, ConfigRoundTripsThroughJson) {
  const ModelConfig config = MixedConfig();
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(config), "mixed");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->layers, config.layers);
  EXPECT_EQ(parsed->final_norm, config.final_norm);
  EXPECT_FALSE(parsed->IsSingleBlock());
  // (3 − 1)·24 + 2·21·9 + 2·8·9 + (4 − 1)·16 + 1·13·17 floats.
  EXPECT_EQ(parsed->StateFloatsPerSlot(), 48 + 378 + 144 + 48 + 221);
}

TEST(BasedKindsTest, DefaultsFillIn) {
  nlohmann::json j = nlohmann::json::parse(ModelConfigToJson(MixedConfig()));
  j["layers"][0]["mixer"] = {{"kind", "short_conv"}, {"d_inner", 8}};
  j["layers"][1]["mixer"] = {{"kind", "taylor_linear_attention"},
                             {"n_heads", 2},
                             {"feature_dim", 16},
                             {"head_dim", 4}};
  j["layers"][1]["norm"] = {{"kind", "rms_norm"}};
  j["layers"][1]["mlp"] = {{"kind", "gated_mlp"}, {"d_ff", 8}};
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump(), "defaults");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->layers[0].mixer.params,
            (ShortConvParams{.d_inner = 8, .kernel_size = 3, .bias = true, .conv_bias = false}
                 .ToValues()));
  EXPECT_EQ(c->layers[1].mixer.params,
            (TaylorLinearAttentionParams{
                 .n_heads = 2, .feature_dim = 16, .head_dim = 4, .eps = 1e-12}
                 .ToValues()));
  EXPECT_EQ(c->layers[1].norm.params, RmsNormParams{.eps = 1e-5}.ToValues());
  EXPECT_EQ(c->layers[1].mlp.params,
            (GatedMlpParams{.d_ff = 8, .activation = GateActivation::kSilu, .bias = false}
                 .ToValues()));
  // 273 features per head for d_f = 16, as in based-360m.
  EXPECT_EQ(TaylorLinearAttentionParams::From(c->layers[1].mixer.params).Features(), 273);
}

TEST(BasedKindsTest, OutOfRangeParametersAreRefusedByField) {
  struct Case {
    std::string layer_role, param;
    nlohmann::json value;
    std::string message;
  };
  // Layers 0 and 3 are short_conv, 1 and 4 taylor_linear_attention, 3 a gated_mlp with gelu.
  const std::vector<Case> cases = {
      {"3/mixer", "kernel_size", 1, "layers[3].mixer.kernel_size"},
      {"3/mixer", "kernel_size", 65, "[2, 64]"},
      {"0/mixer", "d_inner", 0, "layers[0].mixer.d_inner"},
      {"1/mixer", "feature_dim", 65, "layers[1].mixer.feature_dim"},
      {"4/mixer", "eps", 0.0, "layers[4].mixer.eps"},
      {"1/mixer", "bias", true, "layers[1].mixer.bias"},  // taylor has no biases
      {"3/mlp", "activation", "relu", "layers[3].mlp.activation"},
      {"0/norm", "eps", 2.0, "layers[0].norm.eps"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    nlohmann::json j = nlohmann::json::parse(ModelConfigToJson(MixedConfig()));
    const int layer = c.layer_role[0] - '0';
    j["layers"][layer][c.layer_role.substr(2)][c.param] = c.value;
    absl::StatusOr<ModelConfig> parsed = ParseModelConfig(j.dump(), "bad");
    ASSERT_FALSE(parsed.ok());
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message));
  }
}

// ---- State checks ----

TEST(BasedKindsTest, ShortConvStateCheckRefusesNonFiniteAndHuge) {
  const MixerKind& kind = ShortConvKind();
  const ParamValues p = ShortConvParams{.d_inner = 4, .kernel_size = 3}.ToValues();
  std::vector<float> slice(8, -0.5f);  // u may be negative
  EXPECT_FALSE(kind.check_state(p, slice, 1e6f).has_value());
  slice[6] = std::nanf("");
  std::optional<StateProblem> bad = kind.check_state(p, slice, 1e6f);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 6);
  EXPECT_THAT(bad->what, HasSubstr("not finite"));
  EXPECT_EQ(kind.locate_state(p, 6), "u of token t-0 (row 1), channel 2");
  slice[6] = 2e6f;
  ASSERT_TRUE(kind.check_state(p, slice, 1e6f).has_value());
}

TEST(BasedKindsTest, TaylorStateCheckRefusesNegativeTokenCount) {
  const MixerKind& kind = TaylorLinearAttentionKind();
  const TaylorLinearAttentionParams tp{.n_heads = 2, .feature_dim = 2, .head_dim = 3};
  const ParamValues p = tp.ToValues();
  // Per head: S 7 × 3 = 21 floats, then z 7.
  std::vector<float> slice(static_cast<size_t>(tp.StateFloats()), -0.25f);
  slice[21] = slice[28 + 21] = 5.0f;  // z[0] of each head: the token count
  EXPECT_FALSE(kind.check_state(p, slice, 1e6f).has_value());  // other z entries may be < 0
  slice[28 + 21] = -1.0f;
  std::optional<StateProblem> bad = kind.check_state(p, slice, 1e6f);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->index, 49);
  EXPECT_THAT(bad->what, HasSubstr("negative"));
  EXPECT_EQ(kind.locate_state(p, 49), "head 1, z[0]");
  EXPECT_EQ(kind.locate_state(p, 28 + 4), "head 1, S[1][1]");
  slice[28 + 21] = 5.0f;
  slice[3] = std::numeric_limits<float>::infinity();
  ASSERT_TRUE(kind.check_state(p, slice, 1e6f).has_value());
}

TEST(BasedKindsTest, SessionStateValidationLocatesTheLayer) {
  const ModelConfig config = MixedConfig();
  std::vector<float> state(static_cast<size_t>(config.StateFloatsPerSlot()), 0.0f);
  EXPECT_TRUE(ValidateSessionState(config, 0, state, 1e18f).ok());
  const int64_t z0 = config.StateOffsets()[1] + 21 * 8;  // layer 1, head 0, z[0]
  state[z0] = -3.0f;
  const absl::Status s = ValidateSessionState(config, 5, state, 1e18f);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("layer 1, head 0, z[0]"));
}

}  // namespace
}  // namespace linserve
