// The model shapes gpu_bench measures, as parsed configs (the fields derived from the layers
// filled in); kernel_account_test checks them on the CPU.
#ifndef LINSERVE_BENCH_GPU_BENCH_SHAPES_H_
#define LINSERVE_BENCH_GPU_BENCH_SHAPES_H_

#include "absl/status/statusor.h"
#include "model/format/config.h"

namespace linserve {

// The 125M shape: d_model 768, 12 layers of linear attention (12 heads × 64, elu_plus_one),
// d_ff 3072 GELU, LayerNorm pre-norm, sinusoidal positions, biases, vocab 50257, tied head.
absl::StatusOr<ModelConfig> Config125M();

// The based-360m layer pattern (bench/based: taylor_linear_attention at i % 5 == 1,
// sliding_window_attention at i % 5 == 2, short_conv elsewhere; rms_norm, gated_mlp silu) at the
// 125M shape's width, depth and vocabulary: d_model 768 = 12 heads × 64, 12 layers, d_inner and
// d_ff 2 · d_model, feature_dim 16, window 129 (based-360m's), no positions, vocab 50257, tied.
absl::StatusOr<ModelConfig> ConfigBased125M();

// fla's Gated DeltaNet block at the 125M shape's width, depth and vocabulary: 12 layers of
// gated_delta_net (6 q/k heads of 96 and 6 value heads of 192: fla's 0.75·d / 1.5·d allocation,
// conv 4, output gate), rms_norm, a SwiGLU gated_mlp of 2048 (8·d/3), no positions, vocab
// 50257, tied.
absl::StatusOr<ModelConfig> ConfigGatedDeltaNet125M();

// fla's GLA block at the 125M shape's width, depth and vocabulary: 12 layers of
// gated_linear_attention with fla's defaults (4 heads, q/k 0.5·d: heads of 96, v 1·d: heads of
// 192, gate rank 16, no short convolutions, output gate), rms_norm, a SwiGLU gated_mlp of 2048,
// no positions, vocab 50257, tied.
absl::StatusOr<ModelConfig> ConfigGla125M();

// fla's RetNet block at the 125M shape's width, depth and vocabulary: 12 layers of retention with
// fla's defaults (12 heads: q/k 1·d, heads of 64, v 2·d, heads of 128, output gate), rms_norm, a
// SwiGLU gated_mlp of 2048 (as the other families' shapes, not RetNet's hidden_ratio 2), no
// positions, vocab 50257, tied.
absl::StatusOr<ModelConfig> ConfigRetNet125M();

// fla's Mamba-2 block at the 125M shape's width and vocabulary: 24 layers (Mamba's block has no
// MLP: twice the depth for about the same parameters) of mamba2 with fla's defaults (24 heads of
// 64, state 128, one group, conv 4), rms_norm, the MLP kind none, no positions, vocab 50257, tied.
absl::StatusOr<ModelConfig> ConfigMamba2_125M();

}  // namespace linserve

#endif  // LINSERVE_BENCH_GPU_BENCH_SHAPES_H_
