#include "tests/gpu/gpu_test_util.h"

#include <cstdlib>

#include "model/layers/ffn.h"
#include "model/layers/layer_norm.h"
#include "model/layers/sliding_window_attention.h"
#include "tests/testing/random_model.h"

namespace linserve::gpu_test {

ModelConfig LayerListConfig(const ComponentSpec& mixer, const ComponentSpec& norm,
                            const ComponentSpec& mlp, int n_layers) {
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 32;
  c.position = PositionEmbedding::kNone;
  c.eos_token_id = 257;
  for (int l = 0; l < n_layers; ++l) c.layers.push_back({.mixer = mixer, .norm = norm, .mlp = mlp});
  c.n_layers = n_layers;
  c.final_norm = norm;
  // Through config.json text, so that the fields derived from the layers are filled in.
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "LayerListConfig");
  if (!parsed.ok()) {
    ADD_FAILURE() << parsed.status();
    std::abort();
  }
  return *std::move(parsed);
}

std::vector<Variant> ModelVariants() {
  std::vector<Variant> v;
  ModelConfig c = TinyConfig();  // pre-norm, elu_plus_one, sinusoidal, gelu, biases, tied
  v.push_back({"pre_elu_sinusoidal_gelu", c});
  c = TinyConfig();
  c.norm = NormPlacement::kPost;
  c.feature_map = FeatureMap::kExp;
  c.position = PositionEmbedding::kLearned;
  c.max_position = 4096;
  c.activation = Activation::kRelu;
  v.push_back({"post_exp_learned_relu", c});
  c = TinyConfig();
  c.feature_map = FeatureMap::kFavorPlus;
  c.feature_dim = 12;
  c.position = PositionEmbedding::kNone;
  c.activation = Activation::kGeluTanh;
  c.tie_embeddings = false;
  v.push_back({"pre_favor_none_gelutanh_untied", c});
  // relu: one head of 32, not four of 8. φ(q)ᵀz vanishes when every q_f <= 0, and there the
  // output jumps (from 0 to a weighted mean of v); with 8 dims that happens for 1 vector in
  // 256, and bf16 rounding of q near such a point moves the logits by O(1) — a property of the
  // model at that precision, not of an implementation. With 32 dims it practically never does.
  c = TinyConfig();
  c.norm = NormPlacement::kPost;
  c.feature_map = FeatureMap::kRelu;
  c.n_heads = 1;
  c.head_dim = 32;
  c.feature_dim = 32;
  c.bias = false;
  v.push_back({"post_relu_sinusoidal_nobias", c});
  // A wider one: head_dim 64 exercises the full-width column tiles of the attention kernels,
  // an odd d_ff the ragged GEMM shapes.
  c = TinyConfig();
  c.d_model = 128;
  c.n_heads = 2;
  c.head_dim = 64;
  c.feature_dim = 64;
  c.d_ff = 200;
  c.n_layers = 3;
  v.push_back({"pre_elu_wide_heads", c});
  // sliding_window_attention between layer_norm and ffn: window 4 (the ring wraps at once,
  // biases, full rotation) and window 80 (a 150-token prefill wraps it within a piece and across
  // the pieces; rotary_dim below head_dim, no biases).
  const ComponentSpec layer_norm = {.kind = LayerNormKind().name,
                                    .params = LayerNormParams{.eps = 1e-5}.ToValues()};
  const ComponentSpec ffn = {
      .kind = FfnKind().name,
      .params = FfnParams{.d_ff = 48, .activation = Activation::kGelu, .bias = true}.ToValues()};
  const ComponentSpec window4 = {
      .kind = SlidingWindowAttentionKind().name,
      .params = SlidingWindowAttentionParams{.n_heads = 4, .head_dim = 8, .window = 4,
                                             .rotary_dim = 8, .bias = true}
                    .ToValues()};
  v.push_back({"window4_layer_norm_ffn", LayerListConfig(window4, layer_norm, ffn)});
  const ComponentSpec window80 = {
      .kind = SlidingWindowAttentionKind().name,
      .params = SlidingWindowAttentionParams{.n_heads = 2, .head_dim = 16, .window = 80,
                                             .rotary_dim = 8, .bias = false}
                    .ToValues()};
  v.push_back({"window80_layer_norm_ffn", LayerListConfig(window80, layer_norm, ffn)});
  return v;
}

}  // namespace linserve::gpu_test
