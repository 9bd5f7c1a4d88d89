// The delta-rule mixers (gated_delta_net, delta_net) on the CPU: their parameters, tensors and
// state checks; the component against the delta rule written out here in double; prefill in
// pieces (the WY form by chunks) against token-by-token steps, a batch against each slot alone, a
// state exported and imported, and a model mixing them with linear_attention. Parity with the
// PyTorch reference is golden_test's (make_golden.py has cases of both kinds).
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
#include "model/layers/delta_net.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/linear_attention.h"
#include "model/layers/rms_norm.h"
#include "nlohmann/json.hpp"
#include "tests/testing/cpu_mixer_harness.h"
#include "tests/testing/random_model.h"

namespace linserve {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kDModel = 16;

GatedDeltaNetParams Gdn() {
  return {.n_heads = 2,
          .n_v_heads = 4,
          .head_k_dim = 8,
          .head_v_dim = 6,
          .conv_size = 3,
          .conv_bias = true};
}

LayerSpec Layer(ComponentSpec mixer) {
  return {.mixer = std::move(mixer),
          .norm = {RmsNormKind().name, RmsNormParams{}.ToValues()},
          .mlp = {GatedMlpKind().name, GatedMlpParams{.d_ff = 24}.ToValues()}};
}

ComponentSpec GdnMixer(const GatedDeltaNetParams& p) {
  return {GatedDeltaNetKind().name, p.ToValues()};
}

DeltaNetParams Dn() {
  return {.n_heads = 2, .head_k_dim = 8, .head_v_dim = 6, .conv_size = 3, .conv_bias = true};
}

ComponentSpec DnMixer(const DeltaNetParams& p) { return {DeltaNetKind().name, p.ToValues()}; }

DeltaRuleShape ShapeOf(const ComponentSpec& mixer) {
  return mixer.kind == DeltaNetKind().name ? DeltaNetParams::From(mixer.params).Shape()
                                           : GatedDeltaNetParams::From(mixer.params).Shape();
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

// ---- The delta rule in double, from the layer's tensors ----

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<double> Project(const Tensor& w, const double* x) {
  const int64_t out = w.shape[0], in = w.shape[1];
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) y[o] += static_cast<double>(w.data[o * in + i]) * x[i];
  }
  return y;
}

// The mixer's output rows (d_model each, o_proj included) for rows `x` from the zero state.
std::vector<double> DeltaRule(const DeltaRuleShape& p, const LayerWeights& w,
                              absl::Span<const float> x) {
  const int64_t kd = p.KeyDim(), vd = p.ValueDim(), hk = p.k_dim, hv = p.v_dim;
  const int rows = static_cast<int>(x.size() / kDModel);
  std::vector<std::vector<double>> raw;  // q | k | v before the convolutions, per row
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
    // The convolutions: channel c of q | k | v.
    std::vector<double> qkv(r.size());
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
    std::vector<double> a, b, gate;
    if (p.decay) a = Project(w.At("attn.a_proj.weight"), xt.data());
    if (p.beta) b = Project(w.At("attn.b_proj.weight"), xt.data());
    if (p.gate) gate = Project(w.At("attn.g_proj.weight"), xt.data());
    std::vector<double> o_all(static_cast<size_t>(vd));
    for (int64_t vh = 0; vh < p.v_heads; ++vh) {
      const int64_t h = vh / (p.v_heads / p.heads);
      std::vector<double> q(qkv.begin() + h * hk, qkv.begin() + (h + 1) * hk);
      std::vector<double> k(qkv.begin() + kd + h * hk, qkv.begin() + kd + (h + 1) * hk);
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < hk; ++i) qq += q[i] * q[i], kk += k[i] * k[i];
      for (int64_t i = 0; i < hk; ++i) {
        q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(hk));
        k[i] /= std::sqrt(kk + 1e-6);
      }
      double g = 0;  // no decay: S is kept
      if (p.decay) {
        const double dt = a[vh] + w.At("attn.dt_bias").data[vh];
        g = -std::exp(static_cast<double>(w.At("attn.A_log").data[vh])) * std::log1p(std::exp(dt));
      }
      const double beta = (p.beta ? Sigmoid(b[vh]) : 1.0) * (p.allow_neg_eigval ? 2.0 : 1.0);
      double* sh = s.data() + vh * hk * hv;
      for (int64_t i = 0; i < hk * hv; ++i) sh[i] *= std::exp(g);
      double sum_sq = 0;
      for (int64_t j = 0; j < hv; ++j) {
        double kv = 0;
        for (int64_t i = 0; i < hk; ++i) kv += sh[i * hv + j] * k[i];
        const double u = beta * (qkv[2 * kd + vh * hv + j] - kv);
        double o = 0;
        for (int64_t i = 0; i < hk; ++i) {
          sh[i * hv + j] += k[i] * u;
          o += sh[i * hv + j] * q[i];
        }
        o_all[vh * hv + j] = o;
        sum_sq += o * o;
      }
      const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(hv) + p.norm_eps);
      for (int64_t j = 0; j < hv; ++j) {
        double y = o_all[vh * hv + j] * inv * w.At("attn.o_norm.weight").data[j];
        if (p.gate) y *= gate[vh * hv + j] * Sigmoid(gate[vh * hv + j]);
        o_all[vh * hv + j] = y;
      }
    }
    const std::vector<double> y = Project(w.At("attn.o_proj.weight"), o_all.data());
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

// The component gives the rule written out above, by steps and by one prefill, for every
// switch of both kinds: value heads sharing q/k heads, the gate on and off, β from b_proj, 1 or
// doubled, convolution biases, the decay (gated_delta_net) or none (delta_net).
TEST(DeltaRuleTest, StepsAndPrefillAreTheDeltaRule) {
  GatedDeltaNetParams p = Gdn();
  p.use_gate = false;
  p.allow_neg_eigval = true;
  p.conv_bias = false;
  p.n_v_heads = 2;
  p.conv_size = 2;
  DeltaNetParams dn = Dn();
  dn.use_beta = false;
  dn.use_gate = true;
  dn.allow_neg_eigval = true;
  for (const ComponentSpec& mixer : {GdnMixer(Gdn()), GdnMixer(p), DnMixer(Dn()), DnMixer(dn)}) {
    SCOPED_TRACE(ModelConfigToJson(LayersConfig({Layer(mixer)})));
    const std::vector<float> x = RandomRows(kDModel, 30, 3);
    Mixer steps(mixer, 1, 5);
    Mixer prefill(mixer, 1, 5);
    const std::vector<double> want = DeltaRule(ShapeOf(mixer), steps.model.weights.layers[0], x);
    EXPECT_LE(RelativeError(steps.Steps(0, x), want), 1e-5);
    EXPECT_LE(RelativeError(prefill.Prefill(0, x), want), 1e-5);
  }
}

// The check above can fail: another β, or a decay where there is none, gives other outputs.
TEST(DeltaRuleTest, TheDirectCheckSeesBetaAndTheDecay) {
  const std::vector<float> x = RandomRows(kDModel, 12, 3);
  Mixer gdn(GdnMixer(Gdn()), 1, 5);
  DeltaRuleShape shape = Gdn().Shape();
  shape.allow_neg_eigval = true;
  EXPECT_GT(RelativeError(gdn.Steps(0, x), DeltaRule(shape, gdn.model.weights.layers[0], x)), 1e-2);
  shape = Gdn().Shape();
  shape.decay = false;  // the layer decays S
  EXPECT_GT(RelativeError(gdn.Steps(0, x), DeltaRule(shape, gdn.model.weights.layers[0], x)), 1e-2);
  Mixer dn(DnMixer(Dn()), 1, 5);
  shape = Dn().Shape();
  shape.beta = false;  // the layer has b_proj: β = sigmoid(b), not 1
  EXPECT_GT(RelativeError(dn.Steps(0, x), DeltaRule(shape, dn.model.weights.layers[0], x)), 1e-2);
}

// Prefill in pieces of 1, 7, 64 and 150 tokens (chunks of 64: the WY form, a chunk boundary
// anywhere against the convolutions' history) gives the steps' outputs and state up to rounding
// (relative 1e-5), and bitwise where every chunk is one token (pieces of 1, or a chunk size of
// 1: the step itself).
TEST(DeltaRuleTest, PrefillInPiecesEqualsTheSteps) {
  for (const ComponentSpec& mixer : {GdnMixer(Gdn()), DnMixer(Dn())}) {
    SCOPED_TRACE(mixer.kind);
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

// A decay whose log overflows (exp(A_log) = inf: g = −inf) empties S at each token; the WY form,
// whose differences of cumulative decays would be −inf − −inf, gives the steps' finite outputs.
TEST(DeltaRuleTest, AnOverflowingDecayEmptiesTheStateInPrefillAsInSteps) {
  const auto overflow = [](LayerWeights& w) { w.tensors.at("attn.A_log").data[0] = 100.0f; };
  const std::vector<float> x = RandomRows(kDModel, 40, 11);
  Mixer steps(GdnMixer(Gdn()), 1, 9, 64, overflow);
  Mixer prefill(GdnMixer(Gdn()), 1, 9, 64, overflow);
  const std::vector<float> want = steps.Steps(0, x);
  const std::vector<float> got = prefill.Prefill(0, x);
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  for (float v : prefill.State(0)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LE(RelativeError(got, ToDouble(want)), 1e-5);
  EXPECT_LE(RelativeError(prefill.State(0), ToDouble(steps.State(0))), 1e-5);
}

// One decode pass over several slots, each with its own history, gives bitwise what each slot's
// step gives alone.
TEST(DeltaRuleTest, ABatchOfSlotsStepsEachAsAlone) {
  Mixer batched(GdnMixer(Gdn()), 3, 4);
  Mixer alone(GdnMixer(Gdn()), 3, 4);
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
  GatedDeltaNetParams wide = Gdn();
  wide.head_v_dim = 16;
  wide.use_gate = false;
  return LayersConfig(
      {Layer(GdnMixer(Gdn())), Layer(LinearMixer()), Layer(GdnMixer(wide)), Layer(DnMixer(Dn()))});
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

// A model of gated_delta_net, linear_attention and delta_net layers gives the same logits and state
// by prefill in chunks of 1, 7, 64 and 150 as by steps (the chunked forms round otherwise; with
// chunk 1 the state is bitwise the steps'), and a valid state.
TEST(DeltaRuleTest, AMixedModelGivesTheSameLogitsByPrefillAndBySteps) {
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
TEST(DeltaRuleTest, ExportedImportedAndForkedStatesContinueExactly) {
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

nlohmann::json GdnJson() {
  return {{"kind", "gated_delta_net"}, {"n_heads", 2}, {"head_k_dim", 4}, {"head_v_dim", 6}};
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

TEST(DeltaRuleTest, ConfigDefaultsStateSizeAndTensors) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(GdnJson()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const GatedDeltaNetParams p = GatedDeltaNetParams::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.n_v_heads, 2);
  EXPECT_EQ(p.conv_size, 4);
  EXPECT_FALSE(p.conv_bias);
  EXPECT_TRUE(p.use_gate);
  EXPECT_FALSE(p.allow_neg_eigval);
  EXPECT_EQ(p.norm_eps, 1e-5);
  // S: 2 value heads × 4 × 6; history: 3 rows of q (8) | k (8) | v (12).
  const int64_t linear = 4 * 4 * 5;
  EXPECT_EQ(c->StateFloatsPerSlot(), linear + 2 * 4 * 6 + 3 * 28);
  std::vector<std::string> names;
  for (const TensorDecl& t : GatedDeltaNetKind().tensors(p.ToValues(), 16)) names.push_back(t.name);
  EXPECT_EQ(absl::StrJoin(names, " "),
            "attn.q_proj.weight attn.k_proj.weight attn.v_proj.weight attn.a_proj.weight "
            "attn.b_proj.weight attn.g_proj.weight attn.A_log attn.dt_bias "
            "attn.q_conv1d.weight attn.k_conv1d.weight attn.v_conv1d.weight attn.o_norm.weight "
            "attn.o_proj.weight");
  absl::StatusOr<ModelConfig> back = ParseModelConfig(ModelConfigToJson(*c), "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layers, c->layers);
}

// delta_net: its defaults (β from b_proj, no gate), the state of heads × 4 × 6 and the history,
// and the tensors without a decay (no a_proj, A_log, dt_bias) or, without use_beta, b_proj.
TEST(DeltaRuleTest, DeltaNetConfigDefaultsStateSizeAndTensors) {
  const nlohmann::json mixer = {
      {"kind", "delta_net"}, {"n_heads", 2}, {"head_k_dim", 4}, {"head_v_dim", 6}};
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(mixer).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  DeltaNetParams p = DeltaNetParams::From(c->layers[1].mixer.params);
  EXPECT_EQ(p.conv_size, 4);
  EXPECT_TRUE(p.use_beta);
  EXPECT_FALSE(p.use_gate);
  EXPECT_FALSE(p.conv_bias);
  EXPECT_FALSE(p.allow_neg_eigval);
  EXPECT_EQ(p.norm_eps, 1e-5);
  const int64_t linear = 4 * 4 * 5;
  EXPECT_EQ(c->StateFloatsPerSlot(), linear + 2 * 4 * 6 + 3 * 28);
  const auto names = [](const DeltaNetParams& params) {
    std::vector<std::string> out;
    for (const TensorDecl& t : DeltaNetKind().tensors(params.ToValues(), 16)) {
      out.push_back(t.name);
    }
    return absl::StrJoin(out, " ");
  };
  EXPECT_EQ(names(p),
            "attn.q_proj.weight attn.k_proj.weight attn.v_proj.weight attn.b_proj.weight "
            "attn.q_conv1d.weight attn.k_conv1d.weight attn.v_conv1d.weight attn.o_norm.weight "
            "attn.o_proj.weight");
  p.use_beta = false;
  p.use_gate = true;
  EXPECT_EQ(names(p),
            "attn.q_proj.weight attn.k_proj.weight attn.v_proj.weight attn.g_proj.weight "
            "attn.q_conv1d.weight attn.k_conv1d.weight attn.v_conv1d.weight attn.o_norm.weight "
            "attn.o_proj.weight");
  nlohmann::json wrong = mixer;
  wrong["n_v_heads"] = 4;  // gated_delta_net's, not delta_net's
  EXPECT_THAT(ParseError(ConfigJson(wrong)),
              HasSubstr("unknown field \"layers[1].mixer.n_v_heads\""));
}

TEST(DeltaRuleTest, ConfigRefusalsNameTheField) {
  nlohmann::json mixer = GdnJson();
  mixer["n_v_heads"] = 3;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.n_v_heads\": must be a multiple of n_heads (2), "
                        "got 3"));
  mixer = GdnJson();
  mixer["head_k_dim"] = 0;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.head_k_dim\": must be in [1, 1024]"));
  mixer = GdnJson();
  mixer["conv_size"] = 1;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.conv_size\": must be in [2, 64]"));
  mixer = GdnJson();
  mixer.erase("head_v_dim");
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.head_v_dim\": is required"));
  mixer = GdnJson();
  mixer["norm_eps"] = 0;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("field \"layers[1].mixer.norm_eps\": must be in (0, 1]"));
  mixer = GdnJson();
  mixer["use_short_conv"] = false;
  EXPECT_THAT(ParseError(ConfigJson(mixer)),
              HasSubstr("unknown field \"layers[1].mixer.use_short_conv\""));
}

// Weights missing a tensor the config asks for, holding one of the wrong shape, a NaN decay or a
// gate the config does not have are refused naming the tensor.
TEST(DeltaRuleTest, BadWeightsAreRefusedNamingTheTensor) {
  const ModelConfig config = MixedConfig();
  ModelWeights weights = MakeRandomWeights(config, 3);
  ASSERT_TRUE(ValidateWeights(config, weights).ok());
  ModelWeights missing = weights;
  missing.layers[0].tensors.erase("attn.A_log");
  EXPECT_THAT(std::string(ValidateWeights(config, missing).message()),
              HasSubstr("layers.0.attn.A_log"));
  ModelWeights shape = weights;
  shape.layers[2].tensors["attn.v_conv1d.weight"].shape = {32, 2};
  EXPECT_THAT(std::string(ValidateWeights(config, shape).message()),
              HasSubstr("layers.2.attn.v_conv1d.weight"));
  ModelWeights decay = weights;  // a NaN decay would reach every later token
  decay.layers[0].tensors["attn.A_log"].data[1] = std::nanf("");
  EXPECT_THAT(std::string(ValidateWeights(config, decay).message()),
              testing::AllOf(HasSubstr("layers.0.attn.A_log"), HasSubstr("finite")));
  ModelWeights gate = weights;  // layer 2 has no output gate
  gate.layers[2].tensors["attn.g_proj.weight"] = weights.layers[0].tensors["attn.g_proj.weight"];
  EXPECT_THAT(std::string(ValidateWeights(config, gate).message()),
              HasSubstr("layers.2.attn.g_proj.weight"));
}

// Imported states: every value finite and within the bound; a bad one is located by value head
// and S entry, or by history row and q/k/v channel.
TEST(DeltaRuleTest, ImportedStatesWithBadValuesAreRefusedNamingWhere) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(ConfigJson(GdnJson()).dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t base = 4 * 4 * 5;  // layer 1's slice starts after layer 0's
  std::vector<float> state(static_cast<size_t>(c->StateFloatsPerSlot()), 0.5f);
  EXPECT_TRUE(ValidateSessionState(*c, 10, state, 1e18f).ok());
  const auto error = [&] {
    return std::string(ValidateSessionState(*c, 10, state, 1e18f).message());
  };
  // Value head 1, S[2][3]: heads of 4 × 6.
  state[static_cast<size_t>(base + 24 + 2 * 6 + 3)] = std::nanf("");
  EXPECT_THAT(error(), HasSubstr("(layer 1, value head 1, S[2][3]): nan is not finite"));
  state[static_cast<size_t>(base + 24 + 2 * 6 + 3)] = 0.5f;
  // History row 2 (the newest: token t-0), k channel 5: q is 8 wide.
  state[static_cast<size_t>(base + 48 + 2 * 28 + 8 + 5)] = INFINITY;
  EXPECT_THAT(error(), HasSubstr("(layer 1, k of token t-0 (history row 2), channel 5): inf"));
}

}  // namespace
}  // namespace linserve
