// The "gated_linear_attention" mixer (GLA, Yang, Wang, Shen, Panda & Kim 2024, "Gated Linear
// Attention Transformers with Hardware-Efficient Training", as flash-linear-attention's
// GatedLinearAttention layer defines it; docs/model-format.md): linear attention whose state
// decays by a data-dependent gate per key channel. For one token x (d_model):
//   q, k, v = x Wq, x Wk, x Wv           (with use_short_conv: silu(conv(·)) of each, causal
//                                         depthwise convolutions of conv_size taps)
//   gk = max(logsigmoid((x Wg1) Wg2 + bg2) / gate_logit_normalizer, clamp_min)   (key_dim)
//   per head h (S: head_k_dim × head_v_dim):
//     S ← diag(exp(gk_h)) S + k_h v_hᵀ;  o_h = Sᵀ q_h / sqrt(head_k_dim)
//     o_h ← o_h / sqrt(mean(o_h²) + norm_eps) ⊙ g_norm ⊙ silu((x Wg)_h)
//         (without use_output_gate: no silu factor)
//   out = concat_h(o_h) Wo
// Wg1 is gk_proj.0 [gate_low_rank_dim, d_model], Wg2 gk_proj.1 [key_dim, gate_low_rank_dim] with
// its bias; no other biases (fla has none). key_dim = n_heads · head_k_dim, value_dim = n_heads ·
// head_v_dim. The backends run it as the gated linear-attention mixer
// (model/layers/gated_linear_attention_shape.h) with the low-rank gate.
//
// Its state slice: per head S (head_k_dim × head_v_dim, row-major); then, with use_short_conv, the
// convolutions' history: the last conv_size − 1 inputs of q | k | v (before the convolution),
// oldest first: (conv_size − 1) rows of 2 · key_dim + value_dim floats.
#ifndef LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/gated_linear_attention_shape.h"
#include "model/layers/param.h"

namespace linserve {

struct GatedLinearAttentionParams {
  int32_t n_heads = 0;                // [1, 1024]; required
  int32_t head_k_dim = 0;             // [1, 1024]; required
  int32_t head_v_dim = 0;             // [1, 1024]; required
  int32_t gate_low_rank_dim = 16;     // gk_proj's rank, [1, 1024]. Default: 16
  double gate_logit_normalizer = 16;  // gk's divisor, [1, 1e6]. Default: 16
  double clamp_min = -1e4;            // gk's floor, [−1e4, 0]. Default: −1e4 (none in effect)
  bool use_short_conv = false;        // silu short convolutions on q, k, v. Default: false
  int32_t conv_size = 4;              // their taps, [2, 64]. Default: 4
  bool conv_bias = false;             // their biases. Default: false
  bool use_output_gate = true;        // the output gate g_proj. Default: true
  double norm_eps = 1e-5;             // the output norm's eps. Default: 1e-5

  static GatedLinearAttentionParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // The layer as the backends' gated linear-attention mixer reads it (the low-rank gate).
  GatedLinearAttentionShape Shape() const;
};

const MixerKind& GatedLinearAttentionKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_H_
