#include "bench/gpu/bench_shapes.h"

#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_linear_attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/mamba2.h"
#include "model/layers/retention.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/sliding_window_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {
namespace {

constexpr int kDModel = 768;

// Through config.json text, so that the fields derived from the layers are filled in.
absl::StatusOr<ModelConfig> Parsed(const ModelConfig& config) {
  return ParseModelConfig(ModelConfigToJson(config), "gpu_bench shape");
}

ComponentSpec RmsNorm() { return {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()}; }

// fla's blocks: rms_norm and a SwiGLU gated_mlp of 8·d/3 (the 125M FFN's parameters).
ComponentSpec SwiGlu() {
  return {.kind = "gated_mlp", .params = GatedMlpParams{.d_ff = 8 * kDModel / 3}.ToValues()};
}

// `layers` identical layers at the 125M shape's width and vocabulary (byte tokenizer, tied head,
// no positions), the final norm `norm`.
absl::StatusOr<ModelConfig> Uniform(int layers, const ComponentSpec& mixer,
                                    const ComponentSpec& norm, const ComponentSpec& mlp) {
  ModelConfig c;
  c.vocab_size = 50257;
  c.d_model = kDModel;
  c.position = PositionEmbedding::kNone;
  c.tie_embeddings = true;
  c.tokenizer = TokenizerKind::kByte;
  for (int i = 0; i < layers; ++i) c.layers.push_back({.mixer = mixer, .norm = norm, .mlp = mlp});
  c.n_layers = layers;
  c.final_norm = norm;
  return Parsed(c);
}

}  // namespace

absl::StatusOr<ModelConfig> Config125M() {
  ModelConfig c;
  c.vocab_size = 50257;
  c.d_model = 768;
  c.n_layers = 12;
  c.n_heads = 12;
  c.head_dim = 64;
  c.feature_dim = 64;
  c.d_ff = 3072;
  c.norm = NormPlacement::kPre;
  c.activation = Activation::kGelu;
  c.feature_map = FeatureMap::kEluPlusOne;
  c.position = PositionEmbedding::kSinusoidal;
  c.bias = true;
  c.tie_embeddings = true;
  c.tokenizer = TokenizerKind::kByte;
  return Parsed(c);
}

absl::StatusOr<ModelConfig> ConfigBased125M() {
  const int d = 768;
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {.kind = "gated_mlp",
                             .params = GatedMlpParams{.d_ff = 2 * d}.ToValues()};
  ModelConfig c;
  c.vocab_size = 50257;
  c.d_model = d;
  c.position = PositionEmbedding::kNone;
  c.tie_embeddings = true;
  c.tokenizer = TokenizerKind::kByte;
  for (int i = 0; i < 12; ++i) {
    ComponentSpec mixer;
    if (i % 5 == 1) {
      mixer = {.kind = "taylor_linear_attention",
               .params = TaylorLinearAttentionParams{.n_heads = 12, .feature_dim = 16,
                                                     .head_dim = 64, .eps = 1e-6}
                             .ToValues()};
    } else if (i % 5 == 2) {
      mixer = {.kind = "sliding_window_attention",
               .params = SlidingWindowAttentionParams{.n_heads = 12, .head_dim = 64,
                                                      .window = 129, .rotary_dim = 64}
                             .ToValues()};
    } else {
      mixer = {.kind = "short_conv", .params = ShortConvParams{.d_inner = 2 * d}.ToValues()};
    }
    c.layers.push_back({.mixer = mixer, .norm = norm, .mlp = mlp});
  }
  c.n_layers = 12;
  c.final_norm = norm;
  return Parsed(c);
}

absl::StatusOr<ModelConfig> ConfigGatedDeltaNet125M() {
  return Uniform(
      12,
      {.kind = "gated_delta_net",
       .params =
           GatedDeltaNetParams{.n_heads = 6, .n_v_heads = 6, .head_k_dim = 96, .head_v_dim = 192}
               .ToValues()},
      RmsNorm(), SwiGlu());
}

absl::StatusOr<ModelConfig> ConfigRetNet125M() {
  return Uniform(
      12,
      {.kind = "retention",
       .params = RetentionParams{.n_heads = kDModel / 64, .head_k_dim = 64, .head_v_dim = 128}
                     .ToValues()},
      RmsNorm(), SwiGlu());
}

absl::StatusOr<ModelConfig> ConfigMamba2_125M() {
  return Uniform(
      24,
      {.kind = "mamba2",
       .params =
           Mamba2Params{.n_heads = 2 * kDModel / 64, .head_dim = 64, .state_size = 128}.ToValues()},
      RmsNorm(), {.kind = "none", .params = {}});
}

absl::StatusOr<ModelConfig> ConfigGla125M() {
  return Uniform(12,
                 {.kind = "gated_linear_attention",
                  .params =
                      GatedLinearAttentionParams{
                          .n_heads = 4, .head_k_dim = kDModel / 8, .head_v_dim = kDModel / 4}
                          .ToValues()},
                 RmsNorm(), SwiGlu());
}

}  // namespace linserve
