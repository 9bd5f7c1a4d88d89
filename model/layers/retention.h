// The "retention" mixer (RetNet's multi-scale retention, Sun et al. 2023, "Retentive Network: A
// Successor to Transformer for Large Language Models", as flash-linear-attention's
// MultiScaleRetention layer defines it; docs/model-format.md): linear attention with a fixed decay
// per head and rotary position embeddings on q and k. For one token x (d_model) at position t:
//   q, k, v = x Wq, x Wk, x Wv           (with use_short_conv: silu(conv(·)) of each)
//   per head h (S: head_k_dim × head_v_dim), γ_h = 1 − 2^(−5−h):
//     o_h = Σ_{s≤t} γ_h^(t−s) ((R_t q_t,h) · (R_s k_s,h)) v_s,h / sqrt(head_k_dim)
//         R_t: RoPE (GPT-NeoX pairs c and c + head_k_dim/2 turned by t ·
//         rope_base^(−2c/head_k_dim))
//     o_h ← o_h / sqrt(mean(o_h²) + norm_eps) ⊙ g_norm ⊙ silu((x Wg)_h)
//         (without use_output_gate: no silu factor)
//   out = concat_h(o_h) Wo
// No biases (fla has none). The backends run it as the gated linear-attention mixer
// (model/layers/gated_linear_attention_shape.h) with the retention decay and the rotation kept in
// the state's frame: S_t = γ R_−1 S_(t−1) + k_t v_tᵀ, o_t = S_tᵀ q_t / sqrt(head_k_dim), which is
// the sum above with no position stored (R_tᵀ times fla's state, S_fla = Σ γ^(t−s) R_s k_s v_sᵀ).
//
// Its state slice: per head S (head_k_dim × head_v_dim, row-major); then, with use_short_conv, the
// convolutions' history: the last conv_size − 1 inputs of q | k | v, oldest first.
#ifndef LINSERVE_MODEL_LAYERS_RETENTION_H_
#define LINSERVE_MODEL_LAYERS_RETENTION_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/gated_linear_attention_shape.h"
#include "model/layers/param.h"

namespace linserve {

struct RetentionParams {
  int32_t n_heads = 0;          // [1, 1024]; required
  int32_t head_k_dim = 0;       // [2, 1024], even; required
  int32_t head_v_dim = 0;       // [1, 1024]; required
  double rope_base = 10000;     // RoPE's base, (0, 1e9]. Default: 10000
  bool use_short_conv = false;  // silu short convolutions on q, k, v. Default: false
  int32_t conv_size = 4;        // their taps, [2, 64]. Default: 4
  bool conv_bias = false;       // their biases. Default: false
  bool use_output_gate = true;  // the output gate g_proj. Default: true
  double norm_eps = 1e-5;       // the output norm's eps. Default: 1e-5

  static RetentionParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // The layer as the backends' gated linear-attention mixer reads it.
  GatedLinearAttentionShape Shape() const;
};

const MixerKind& RetentionKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_RETENTION_H_
