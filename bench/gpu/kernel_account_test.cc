#include "bench/gpu/kernel_account.h"

#include <string>
#include <tuple>
#include <vector>

#include "bench/gpu/bench_shapes.h"
#include "gtest/gtest.h"
#include "model/layers/delta_net.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_linear_attention.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/mamba2.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/sliding_window_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {
namespace {

const KernelCost* Find(const std::vector<KernelCost>& account, const std::string& name) {
  for (const KernelCost& c : account) {
    if (c.name == name) return &c;
  }
  ADD_FAILURE() << "no kernel named " << name;
  return nullptr;
}

// One single-block layer: vocab 10, d 4, one head of 4, φ 4 wide, d_ff 8, pre-norm.
ModelConfig SingleBlockConfig() {
  ModelConfig c;
  c.vocab_size = 10;
  c.d_model = 4;
  c.n_layers = 1;
  c.n_heads = 1;
  c.head_dim = 4;
  c.feature_dim = 4;
  c.d_ff = 8;
  return c;
}

bool Has(const std::vector<KernelCost>& account, const std::string& name) {
  for (const KernelCost& c : account) {
    if (c.name == name) return true;
  }
  return false;
}

void ExpectCost(const std::vector<KernelCost>& account, const std::string& name, int launches,
                KernelBytes bytes, int64_t flops) {
  SCOPED_TRACE(name);
  const KernelCost* c = Find(account, name);
  if (c == nullptr) return;
  EXPECT_EQ(c->launches, launches);
  EXPECT_EQ(c->bytes.weights, bytes.weights);
  EXPECT_EQ(c->bytes.state, bytes.state);
  EXPECT_EQ(c->bytes.activations, bytes.activations);
  EXPECT_EQ(c->bytes.logits, bytes.logits);
  EXPECT_EQ(c->flops, flops);
}

// One single-block layer (vocab 10, d 4, one head of 4, φ 4 wide, d_ff 8, pre-norm), batch 2,
// bf16 matrices (only fc2, whose input is d_ff = 8 wide, is wide enough for the fused projections:
// kFusedEpilogueKMultiple); every figure below is worked by hand from kernel_account.h's rules.
TEST(KernelAccountTest, SingleBlockLayerByHand) {
  const ModelConfig c = SingleBlockConfig();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(c, 2, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  std::vector<std::string> names;
  for (const KernelCost& k : a) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "embedding + layer_norm", "gemm qkv", "linear_attention decode", "gemm o",
                       "layer_norm (+ residual add)", "gemm fc1", "bias + activation", "gemm fc2",
                       "lm head", "sample"}));
  // 2 rows × 4 bf16 gathered; x: 2 × 4 fp32 written; the first norm in the same kernel reads x
  // (32) and writes bf16 y (16).
  ExpectCost(a, "embedding + layer_norm", 1, {.weights = 16, .activations = 32 + 48}, 0);
  // w 12 × 4 bf16 = 96; x 2 × 4 bf16 = 16, y 2 × 12 fp32 = 96; 2·2·12·4.
  ExpectCost(a, "gemm qkv", 1, {.weights = 96, .activations = 112}, 192);
  // S and z: 1 head × 4 × (4 + 1) fp32 = 80 per session, read and written for 2 sessions;
  // q, k, v 2 × 12 fp32 = 96, o 2 × 4 bf16 = 16; 2 · 1 · 4 · (4·4 + 3).
  ExpectCost(a, "linear_attention decode", 1, {.state = 320, .activations = 112}, 152);
  ExpectCost(a, "gemm o", 1, {.weights = 32, .activations = 48}, 64);
  // x and delta read, x written (3 × 32), bf16 y (16): after o in its own kernel, after fc2 in
  // fc2's.
  ExpectCost(a, "layer_norm (+ residual add)", 1, {.activations = 112}, 0);
  ExpectCost(a, "gemm fc1", 1, {.weights = 64, .activations = 80}, 128);
  // fp32 in 2 × 8 (64), bf16 out (32).
  ExpectCost(a, "bias + activation", 1, {.activations = 96}, 0);
  ExpectCost(a, "gemm fc2", 1, {.weights = 64, .activations = 64 + 112}, 128);
  // w 10 × 4 bf16 = 80; x 2 × 4 bf16 = 16; logits 2 × 10 fp32 = 80.
  ExpectCost(a, "lm head", 1, {.weights = 80, .activations = 16, .logits = 80}, 160);
  ExpectCost(a, "sample", 1, {.logits = 80}, 0);
  const KernelCost total = AccountTotal(a);
  EXPECT_EQ(total.launches, 10);
  EXPECT_EQ(total.bytes,
            (KernelBytes{.weights = 352, .state = 320, .activations = 832, .logits = 160}));
  EXPECT_EQ(total.flops, 824);
  // fp32 matrices double every weight byte, and fc1 writes fp32 products that the activation
  // kernel reads (fp32 in 2 × 8, 64; fp32 out, 64).
  absl::StatusOr<std::vector<KernelCost>> fp32 = DecodeKernelAccount(c, 2, 4);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(AccountTotal(*fp32).bytes.weights, 704);
  ExpectCost(*fp32, "gemm fc1", 1, {.weights = 128, .activations = 32 + 64}, 128);
  ExpectCost(*fp32, "bias + activation", 1, {.activations = 128}, 0);
  // and the norms have their own rows: twice x and delta read, x written (3 × 32), fp32 y (32).
  ExpectCost(*fp32, "gemm o", 1, {.weights = 64, .activations = 32 + 32}, 64);
  ExpectCost(*fp32, "layer_norm (+ residual add)", 2, {.activations = 2 * 128}, 0);
  EXPECT_EQ(AccountTotal(*fp32).launches, 11);
  // So from kFusedEpilogueMaxRows + 1 rows in bf16: fp32 in 5 × 8 (160), bf16 out (80); x and
  // delta read, x written (3 × 80), bf16 y (40), twice.
  absl::StatusOr<std::vector<KernelCost>> five =
      DecodeKernelAccount(c, kFusedEpilogueMaxRows + 1, 2);
  ASSERT_TRUE(five.ok());
  ExpectCost(*five, "bias + activation", 1, {.activations = 240}, 0);
  ExpectCost(*five, "layer_norm (+ residual add)", 2, {.activations = 2 * 280}, 0);
}

// A single-block layer wide enough for the fused projections (every input width a multiple of
// kFusedEpilogueKMultiple: vocab 10, d 8, one head of 8, φ 8 wide, d_ff 16), batch 2, bf16: fc1
// writes the hidden rows itself, and o and fc2 carry the add + norm after them; by hand.
TEST(KernelAccountTest, FusedProjectionsByHand) {
  ModelConfig c = SingleBlockConfig();
  c.d_model = 8;
  c.head_dim = 8;
  c.feature_dim = 8;
  c.d_ff = 16;
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(c, 2, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  std::vector<std::string> names;
  for (const KernelCost& k : a) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding + layer_norm", "gemm qkv",
                                             "linear_attention decode", "gemm o", "gemm fc1",
                                             "gemm fc2", "lm head", "sample"}));
  // 2 rows × 8 bf16 gathered; x 2 × 8 fp32 written and read back, bf16 y (32).
  ExpectCost(a, "embedding + layer_norm", 1, {.weights = 32, .activations = 64 + 64 + 32}, 0);
  // w 24 × 8 bf16; x 2 × 8 bf16 in, 2 × 24 fp32 out.
  ExpectCost(a, "gemm qkv", 1, {.weights = 384, .activations = 32 + 192}, 768);
  // S and z 8 × 9 fp32 (288) per session, read and written; q, k, v 2 × 24 fp32 in, o 2 × 8 bf16
  // out; 2 · 8 · (4 · 8 + 3).
  ExpectCost(a, "linear_attention decode", 1, {.state = 1152, .activations = 192 + 32}, 560);
  // The product (x 32 in, y 64 out) and the add + norm after it: x and delta read, x written
  // (3 × 64), bf16 y (32).
  ExpectCost(a, "gemm o", 1, {.weights = 128, .activations = 96 + 224}, 256);
  // x 2 × 8 bf16 in, the hidden rows 2 × 16 bf16 out.
  ExpectCost(a, "gemm fc1", 1, {.weights = 256, .activations = 32 + 64}, 512);
  ExpectCost(a, "gemm fc2", 1, {.weights = 256, .activations = 64 + 64 + 224}, 512);
  ExpectCost(a, "lm head", 1, {.weights = 160, .activations = 32, .logits = 80}, 320);
  EXPECT_EQ(AccountTotal(a).launches, 8);
  // From kFusedEpilogueMaxRows + 1 rows the norms and the activation have their own kernels.
  absl::StatusOr<std::vector<KernelCost>> five =
      DecodeKernelAccount(c, kFusedEpilogueMaxRows + 1, 2);
  ASSERT_TRUE(five.ok());
  EXPECT_TRUE(Has(*five, "layer_norm (+ residual add)"));
  EXPECT_TRUE(Has(*five, "bias + activation"));
  EXPECT_EQ(AccountTotal(*five).launches, 11);
}

// The Based kinds (short_conv, taylor_linear_attention, sliding_window_attention, rms_norm,
// gated_mlp), d 4, batch 1, bf16, by hand.
TEST(KernelAccountTest, BasedKindsByHand) {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {.kind = "gated_mlp",
                             .params = GatedMlpParams{.d_ff = 4}.ToValues()};
  const ComponentSpec conv = {
      .kind = "short_conv", .params = ShortConvParams{.d_inner = 4, .kernel_size = 3}.ToValues()};
  const ComponentSpec taylor = {
      .kind = "taylor_linear_attention",
      .params = TaylorLinearAttentionParams{.n_heads = 1, .feature_dim = 2, .head_dim = 4}
                    .ToValues()};
  const ComponentSpec window = {
      .kind = "sliding_window_attention",
      .params =
          SlidingWindowAttentionParams{.n_heads = 1, .head_dim = 4, .window = 3, .rotary_dim = 4}
              .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.position = PositionEmbedding::kNone;
  for (const ComponentSpec& mixer : {conv, taylor, window}) {
    c.layers.push_back({.mixer = mixer, .norm = norm, .mlp = mlp});
  }
  c.n_layers = 3;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(*parsed, 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  // w 8 × 4 bf16 = 64; x 4 bf16 = 8, y (u and g) 8 fp32 = 32; 2 · 8 · 4.
  ExpectCost(a, "gemm conv_in", 1, {.weights = 64, .activations = 40}, 64);
  // K − 1 = 2 rows of 4 fp32 read and rewritten (64); u, g fp32 (32) in, bf16 out (8);
  // K · d_inner = 12 multiply-adds.
  ExpectCost(a, "short_conv decode", 1, {.state = 64, .activations = 40}, 24);
  // F = 1 + 2 + 4 = 7: S and z 7 × 5 fp32 = 140, read and written; q, k 2 wide, v 4: 8 fp32
  // (32) in, 4 bf16 (8) out; 7 · (4·4 + 3).
  ExpectCost(a, "taylor_linear_attention decode", 1, {.state = 280, .activations = 40}, 133);
  // Taylor's q, k, v: 8 × 4; the window's: 12 × 4; bf16.
  ExpectCost(a, "gemm qkv", 2, {.weights = 160, .activations = 8 + 32 + 8 + 48}, 160);
  // Ring of 2 entries and the new one, k and v of 4 fp32 each: 3 · 2 · 4 · 4 = 96; q, k, v 12
  // fp32 (48) in, 4 bf16 (8) out; 4 · window 3 · 4.
  ExpectCost(a, "sliding_window_attention decode", 1, {.state = 96, .activations = 56}, 48);
  // Pre-norm: the first norm is in the embedding's kernel; then 2 per layer, each 3 × 16 + 8 (d 4
  // is too narrow for the fused projections).
  EXPECT_TRUE(Has(a, "embedding + rms_norm"));
  EXPECT_FALSE(Has(a, "rms_norm"));
  ExpectCost(a, "rms_norm (+ residual add)", 6, {.activations = 6 * 56}, 0);
  ExpectCost(a, "gemm fc1", 3, {.weights = 3 * 64, .activations = 3 * (8 + 32)}, 3 * 64);
  // fp32 value and gate 8 (32) in, bf16 4 (8) out.
  ExpectCost(a, "bias + gate", 3, {.activations = 3 * 40}, 0);
  ExpectCost(a, "gemm conv_out", 1, {.weights = 32, .activations = 8 + 16}, 32);
}

// gpu_bench's two shapes parse and account as their layers say. 125M at batch 1, bf16: every
// layer matrix once (12 × (4 · 768² + 2 · 768 · 3072) parameters), the head (50257 × 768) and one
// gathered embedding row; the state read and written whole.
TEST(KernelAccountTest, BenchShapes) {
  absl::StatusOr<ModelConfig> linear = Config125M();
  ASSERT_TRUE(linear.ok()) << linear.status();
  absl::StatusOr<std::vector<KernelCost>> a = DecodeKernelAccount(*linear, 1, 2);
  ASSERT_TRUE(a.ok()) << a.status();
  const KernelCost total = AccountTotal(*a);
  EXPECT_EQ(total.bytes.weights, 2 * (12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768 + 768));
  EXPECT_EQ(total.bytes.state, 2 * linear->StateFloatsPerSlot() * 4);
  EXPECT_EQ(total.bytes.logits, 2 * 50257 * 4);
  // Launches: the embedding with the first norm, 5 per layer (q/k/v, attention, o with its norm,
  // fc1 with its activation, fc2 with its norm), the head and the pick; 8 per layer from 5 rows.
  EXPECT_EQ(total.launches, 1 + 12 * 5 + 2);
  absl::StatusOr<std::vector<KernelCost>> a64 = DecodeKernelAccount(*linear, 64, 2);
  ASSERT_TRUE(a64.ok()) << a64.status();
  EXPECT_EQ(AccountTotal(*a64).launches, 1 + 12 * 8 + 2);

  absl::StatusOr<ModelConfig> based = ConfigBased125M();
  ASSERT_TRUE(based.ok()) << based.status();
  absl::StatusOr<std::vector<KernelCost>> b = DecodeKernelAccount(*based, 64, 2);
  ASSERT_TRUE(b.ok()) << b.status();
  // Layers 1, 6, 11 Taylor; 2, 7 sliding window; the other 7 short convolutions.
  auto launches = [&](const std::string& name) {
    const KernelCost* c = Find(*b, name);
    return c == nullptr ? -1 : c->launches;
  };
  EXPECT_EQ(launches("taylor_linear_attention decode"), 3);
  EXPECT_EQ(launches("sliding_window_attention decode"), 2);
  EXPECT_EQ(launches("short_conv decode"), 7);
  EXPECT_EQ(launches("gemm qkv"), 5);
  EXPECT_EQ(launches("gemm conv_in"), 7);
  EXPECT_FALSE(Has(*b, "rms_norm"));  // in the embedding's kernel
  EXPECT_EQ(launches("rms_norm (+ residual add)"), 24);
  EXPECT_EQ(launches("bias + gate"), 12);
  // Taylor: F = 1 + 16 + 256 = 273 features × (64 + 1) per head, 12 heads, read and written,
  // 64 sessions, 3 layers.
  EXPECT_EQ(Find(*b, "taylor_linear_attention decode")->bytes.state,
            3 * 64 * 2 * 12 * 273 * 65 * 4);

  absl::StatusOr<ModelConfig> gdn = ConfigGatedDeltaNet125M();
  ASSERT_TRUE(gdn.ok()) << gdn.status();
  absl::StatusOr<std::vector<KernelCost>> g = DecodeKernelAccount(*gdn, 1, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  // Per layer: q, k 576 · 768 each, v, g, o 1152 · 768 each, a, b 6 · 768 each, SwiGLU
  // 3 · 768 · 2048; the head; one embedding row. The state: S (6 × 96 × 192) and 3 rows of
  // 2304 convolved channels, read and written.
  const KernelCost gdn_total = AccountTotal(*g);
  EXPECT_EQ(gdn_total.bytes.weights,
            2 * (12 * (2 * 576 * 768 + 3 * 1152 * 768 + 2 * 6 * 768 + 3 * 768 * 2048) +
                 50257 * 768 + 768));
  EXPECT_EQ(gdn_total.bytes.state, 2 * gdn->StateFloatsPerSlot() * 4);
  EXPECT_EQ(gdn->StateFloatsPerSlot(), 12 * (6 * 96 * 192 + 3 * 2304));

  absl::StatusOr<ModelConfig> gla = ConfigGla125M();
  ASSERT_TRUE(gla.ok()) << gla.status();
  absl::StatusOr<std::vector<KernelCost>> l = DecodeKernelAccount(*gla, 1, 2);
  ASSERT_TRUE(l.ok()) << l.status();
  // Per layer: q, k 384 · 768 each, v, g, o 768 · 768 each, gk_proj.0 16 · 768, SwiGLU
  // 3 · 768 · 2048 (bf16); gk_proj.1 384 · 16 and its bias (fp32); the head; one embedding row.
  // The state: S (4 × 96 × 192), read and written.
  const KernelCost gla_total = AccountTotal(*l);
  EXPECT_EQ(
      gla_total.bytes.weights,
      2 * (12 * (2 * 384 * 768 + 3 * 768 * 768 + 16 * 768 + 3 * 768 * 2048) + 50257 * 768 + 768) +
          12 * 4 * (384 * 16 + 384));
  EXPECT_EQ(gla_total.bytes.state, 2 * gla->StateFloatsPerSlot() * 4);
  EXPECT_EQ(gla->StateFloatsPerSlot(), 12 * 4 * 96 * 192);

  absl::StatusOr<ModelConfig> ret = ConfigRetNet125M();
  ASSERT_TRUE(ret.ok()) << ret.status();
  absl::StatusOr<std::vector<KernelCost>> r = DecodeKernelAccount(*ret, 1, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  // Per layer: q, k 768 · 768 each, v, g 1536 · 768 each, o 768 · 1536, SwiGLU 3 · 768 · 2048; no
  // gate projection. The state: S (12 × 64 × 128), read and written; the turn's 3 FLOPs more per
  // S entry than GLA's 5.
  const KernelCost ret_total = AccountTotal(*r);
  EXPECT_EQ(ret_total.bytes.weights,
            2 * (12 * (2 * 768 * 768 + 3 * 1536 * 768 + 3 * 768 * 2048) + 50257 * 768 + 768));
  EXPECT_EQ(ret->StateFloatsPerSlot(), 12 * 12 * 64 * 128);
  EXPECT_EQ(Find(*r, "retention decode")->flops, 12 * 8 * 12 * 64 * 128);

  absl::StatusOr<ModelConfig> mamba = ConfigMamba2_125M();
  ASSERT_TRUE(mamba.ok()) << mamba.status();
  absl::StatusOr<std::vector<KernelCost>> m = DecodeKernelAccount(*mamba, 1, 2);
  ASSERT_TRUE(m.ok()) << m.status();
  // Per layer: in_proj (2 · 1536 + 2 · 128 + 24) · 768 and out_proj 768 · 1536; no MLP. The state:
  // S (24 × 128 × 64) and 3 rows of 1792 convolved channels, read and written.
  EXPECT_EQ(AccountTotal(*m).bytes.weights,
            2 * (24 * (3352 * 768 + 768 * 1536) + 50257 * 768 + 768));
  EXPECT_EQ(mamba->StateFloatsPerSlot(), 24 * (24 * 128 * 64 + 3 * 1792));
}

// gated_delta_net, d 4, batch 1, bf16, by hand: 1 q/k head of 2, 2 value heads of 3, conv 3,
// with the gate (C = 2 + 2 + 6 = 10 convolved channels).
TEST(KernelAccountTest, GatedDeltaNetByHand) {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {.kind = "gated_mlp", .params = GatedMlpParams{.d_ff = 4}.ToValues()};
  const ComponentSpec gdn = {
      .kind = "gated_delta_net",
      .params =
          GatedDeltaNetParams{
              .n_heads = 1, .n_v_heads = 2, .head_k_dim = 2, .head_v_dim = 3, .conv_size = 3}
              .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.position = PositionEmbedding::kNone;
  c.layers = {{.mixer = gdn, .norm = norm, .mlp = mlp}};
  c.n_layers = 1;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(*parsed, 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  // q | k | v 10, a and b 2 each, the gate 6: 20 × 4 bf16 = 160; x 8, y 20 fp32 = 80.
  ExpectCost(a, "gemm gdn_in", 1, {.weights = 160, .activations = 88}, 160);
  // 2 past rows of 10 fp32 read and rewritten (160); 10 fp32 in and out (80); 2 · 3 · 10.
  ExpectCost(a, "gated_delta_net conv", 1, {.state = 160, .activations = 80}, 60);
  // S: 2 heads × 2 × 3 fp32 = 48, read and written; in 10 + 2 + 2 + 6 = 20 fp32 (80), out 6
  // bf16 (12); 7 · 12.
  ExpectCost(a, "gated_delta_net decode", 1, {.state = 96, .activations = 92}, 84);
  ExpectCost(a, "gemm o", 1, {.weights = 48, .activations = 12 + 16}, 48);
}

// gated_linear_attention, d 4, batch 1, bf16, by hand: 1 head, k 2, v 3, gate rank 2, the
// output gate, no convolutions: q | k | v 7 channels, the low rank 2, the gate 3.
TEST(KernelAccountTest, GatedLinearAttentionByHand) {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {.kind = "gated_mlp", .params = GatedMlpParams{.d_ff = 4}.ToValues()};
  const ComponentSpec gla = {
      .kind = "gated_linear_attention",
      .params =
          GatedLinearAttentionParams{
              .n_heads = 1, .head_k_dim = 2, .head_v_dim = 3, .gate_low_rank_dim = 2}
              .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.position = PositionEmbedding::kNone;
  c.layers = {{.mixer = gla, .norm = norm, .mlp = mlp}};
  c.n_layers = 1;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(*parsed, 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  // 7 + 2 + 3 = 12 rows × 4 bf16 = 96; x 8, y 12 fp32 = 56.
  ExpectCost(a, "gemm gla_in", 1, {.weights = 96, .activations = 56}, 96);
  for (const KernelCost& c : a) EXPECT_NE(c.name, "gated_linear_attention conv");
  // gk_proj.1: 2 × 2 + 2 fp32 = 24; S 2 × 3 fp32 = 24, read and written; in 12 fp32 (48), out 3
  // bf16 (6); 5 · 6 + 2 · 2 · 2.
  ExpectCost(a, "gated_linear_attention decode", 1, {.weights = 24, .state = 48, .activations = 54},
             38);
  ExpectCost(a, "gemm o", 1, {.weights = 24, .activations = 6 + 16}, 24);
}

// mamba2 in Mamba's block (the MLP kind "none": no MLP and no second norm), d 4, batch 1, bf16,
// two layers: 2 heads of 2, state 3, 1 group, conv 3: x | B | C 10 channels, in_proj 4 + 10 + 2.
TEST(KernelAccountTest, Mamba2WithoutAnMlpByHand) {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec none = {.kind = "none", .params = {}};
  const ComponentSpec mamba = {
      .kind = "mamba2",
      .params =
          Mamba2Params{.n_heads = 2, .head_dim = 2, .state_size = 3, .conv_size = 3}.ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.position = PositionEmbedding::kNone;
  c.layers = {{.mixer = mamba, .norm = norm, .mlp = none},
              {.mixer = mamba, .norm = norm, .mlp = none}};
  c.n_layers = 2;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(*parsed, 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  // 16 rows × 4 bf16 = 128 per layer; x 8, y 16 fp32 = 72.
  ExpectCost(a, "gemm mamba_in", 2, {.weights = 256, .activations = 144}, 256);
  // 2 past rows of 10 fp32 read and rewritten (160); 10 in, 10 out (80); 2 · 3 · 10.
  ExpectCost(a, "mamba2 conv", 2, {.state = 320, .activations = 160}, 120);
  // S: 2 × 3 × 2 fp32 = 48, read and written; x | B | C and dt 12 fp32 in, y 4 fp32 out;
  // 5 · 12 + 3 · 4.
  ExpectCost(a, "mamba2 scan", 2, {.state = 192, .activations = 128}, 144);
  ExpectCost(a, "mamba2 norm", 2, {.activations = 2 * (32 + 8)}, 48);
  // One norm per layer after its mixer (the next layer's, then the final norm); each: x, the
  // delta and the sum (fp32) and the normed row (bf16). The first norm is the embedding's: x
  // written and read back (fp32), the normed row (bf16).
  ExpectCost(a, "rms_norm (+ residual add)", 2, {.activations = 2 * (48 + 8)}, 0);
  ExpectCost(a, "embedding + rms_norm", 1, {.weights = 8, .activations = 16 + 16 + 8}, 0);
}

// delta_net on the same kernels, d 4, batch 1, bf16: 1 head, k 2, v 3, conv 3, no β projection,
// the gate: q | k | v 7 channels, then the gate 3 (no a, no b).
TEST(KernelAccountTest, DeltaNetByHand) {
  const ComponentSpec norm = {.kind = "rms_norm", .params = RmsNormParams{}.ToValues()};
  const ComponentSpec mlp = {.kind = "gated_mlp", .params = GatedMlpParams{.d_ff = 4}.ToValues()};
  const ComponentSpec dn = {.kind = "delta_net",
                            .params = DeltaNetParams{.n_heads = 1,
                                                     .head_k_dim = 2,
                                                     .head_v_dim = 3,
                                                     .conv_size = 3,
                                                     .use_beta = false,
                                                     .use_gate = true}
                                          .ToValues()};
  ModelConfig c;
  c.vocab_size = 260;
  c.d_model = 4;
  c.position = PositionEmbedding::kNone;
  c.layers = {{.mixer = dn, .norm = norm, .mlp = mlp}};
  c.n_layers = 1;
  c.final_norm = norm;
  absl::StatusOr<ModelConfig> parsed = ParseModelConfig(ModelConfigToJson(c), "test");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<std::vector<KernelCost>> got = DecodeKernelAccount(*parsed, 1, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  // 10 × 4 bf16 = 80; x 8, y 10 fp32 = 40.
  ExpectCost(a, "gemm gdn_in", 1, {.weights = 80, .activations = 48}, 80);
  // 2 past rows of 7 fp32 read and rewritten (112); 7 fp32 in and out (56); 2 · 3 · 7.
  ExpectCost(a, "delta_net conv", 1, {.state = 112, .activations = 56}, 42);
  // S 2 × 3 fp32 = 24, read and written; in 7 + 3 = 10 fp32 (40), out 3 bf16 (6); 7 · 6.
  ExpectCost(a, "delta_net decode", 1, {.state = 48, .activations = 46}, 42);
}

TEST(KernelAccountTest, RefusesBadArguments) {
  const ModelConfig c = SingleBlockConfig();
  absl::StatusOr<std::vector<KernelCost>> zero = DecodeKernelAccount(c, 0, 2);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("batch"), std::string::npos);
  absl::StatusOr<std::vector<KernelCost>> odd = DecodeKernelAccount(c, 1, 3);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("weight_element_bytes"), std::string::npos);
  for (const auto& [tokens, pass_rows, chunk] :
       {std::tuple{0, 64, 16}, std::tuple{10, 0, 16}, std::tuple{10, 64, 0}}) {
    absl::StatusOr<std::vector<KernelCost>> bad =
        PrefillKernelAccount(c, tokens, pass_rows, chunk, 2);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("PrefillKernelAccount"), std::string::npos);
  }
  EXPECT_EQ(PrefillKernelAccount(c, 10, 64, 16, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The single-block layer's prefill of 130 tokens in passes of 64 (3 passes: the weights and the
// state read three times) and chunks of 16, bf16; every figure worked by hand.
TEST(KernelAccountTest, SingleBlockPrefillByHand) {
  const ModelConfig c = SingleBlockConfig();
  absl::StatusOr<std::vector<KernelCost>> got = PrefillKernelAccount(c, 130, 64, 16, 2);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::vector<KernelCost>& a = *got;
  std::vector<std::string> names;
  for (const KernelCost& k : a) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{"embedding + layer_norm", "gemm qkv",
                                             "linear_attention prefill", "gemm o",
                                             "layer_norm (+ residual add)", "gemm fc1",
                                             "bias + activation", "gemm fc2", "lm head"}));
  // 130 rows × 4 bf16 gathered; x 130 × 4 fp32 written, read back by the first norm, which
  // writes 130 × 4 bf16.
  ExpectCost(a, "embedding + layer_norm", 1, {.weights = 1040, .activations = 2080 + 2080 + 1040},
             0);
  // w 12 × 4 bf16 (96) three times; x 130 × 4 bf16 in, 130 × 12 fp32 out; 2 · 130 · 12 · 4.
  ExpectCost(a, "gemm qkv", 1, {.weights = 288, .activations = 1040 + 6240}, 12480);
  // S and z 4 × 5 fp32 (80), read and written per pass; q, k, v 130 × 12 fp32 in, o 130 × 4
  // bf16 out; per token 4 · 4 · 5 + 16 · (4 + 4 + 1).
  ExpectCost(a, "linear_attention prefill", 1, {.state = 480, .activations = 6240 + 1040},
             130 * (80 + 144));
  for (const KernelCost& k : a) {
    if (k.name == "linear_attention prefill") {
      EXPECT_EQ(k.cuda_kernels,
                "FeatureMapsKernel|ChunkSumKernel|ChunkScanKernel|ChunkOutputKernel|"
                "ChunkFinalKernel");
    }
  }
  ExpectCost(a, "gemm o", 1, {.weights = 96, .activations = 1040 + 2080}, 4160);
  // 130 rows: the norms have their own kernel (3 × 2080 + 1040 each).
  ExpectCost(a, "layer_norm (+ residual add)", 2, {.activations = 2 * 7280}, 0);
  ExpectCost(a, "gemm fc1", 1, {.weights = 192, .activations = 1040 + 4160}, 8320);
  ExpectCost(a, "bias + activation", 1, {.activations = 4160 + 2080}, 0);
  ExpectCost(a, "gemm fc2", 1, {.weights = 192, .activations = 2080 + 2080}, 8320);
  // The last token's logits only: w 10 × 4 bf16 once, x 4 bf16, 10 fp32 logits.
  ExpectCost(a, "lm head", 1, {.weights = 80, .activations = 8, .logits = 40}, 80);
  EXPECT_EQ(AccountTotal(a).launches, 10);
}

}  // namespace
}  // namespace linserve
