// The "gated_delta_net" mixer (Gated DeltaNet, Yang, Kautz & Hatamizadeh 2024, as
// flash-linear-attention's GatedDeltaNet layer defines it; docs/model-format.md): the delta rule
// with a scalar data-dependent decay per value head. For one token x (d_model):
//   q, k, v = silu(conv_q(x Wq)), silu(conv_k(x Wk)), silu(conv_v(x Wv))   causal depthwise
//             convolutions of conv_size taps (+ their biases with conv_bias)
//   per value head h (n_v_heads of them; each n_v_heads / n_heads consecutive value heads share
//   the q/k head h / (n_v_heads / n_heads)):
//     q̂ = q_h / sqrt(Σ q_h² + 1e-6) / sqrt(head_k_dim),  k̂ = k_h / sqrt(Σ k_h² + 1e-6)
//     β = sigmoid(x Wb)_h (· 2 with allow_neg_eigval)
//     g = −exp(A_log_h) · softplus((x Wa)_h + dt_bias_h)
//     S ← exp(g) S;  u = β (v_h − Sᵀk̂);  S ← S + k̂ uᵀ;  o_h = Sᵀq̂
//         (S: head_k_dim × head_v_dim)
//     o_h ← o_h / sqrt(mean(o_h²) + norm_eps) ⊙ o_norm ⊙ silu((x Wg)_h)
//         (without use_gate: no silu factor)
//   out = concat_h(o_h) Wo
// No biases on the projections (fla has none). The backends run it as the delta-rule mixer
// (model/layers/delta_rule_shape.h) with the decay and β on.
//
// Its state slice: per value head S (head_k_dim × head_v_dim, row-major), then the convolutions'
// history: the last conv_size − 1 inputs of q | k | v (before the convolution), oldest first:
// (conv_size − 1) rows of 2 · key_dim + value_dim floats (q's key_dim, k's key_dim, v's
// value_dim), key_dim = n_heads · head_k_dim, value_dim = n_v_heads · head_v_dim.
#ifndef LINSERVE_MODEL_LAYERS_GATED_DELTA_NET_H_
#define LINSERVE_MODEL_LAYERS_GATED_DELTA_NET_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/delta_rule_shape.h"
#include "model/layers/param.h"

namespace linserve {

struct GatedDeltaNetParams {
  int32_t n_heads = 0;            // q/k heads, [1, 1024]; required
  int32_t n_v_heads = 0;          // value heads, a multiple of n_heads. Default: n_heads
  int32_t head_k_dim = 0;         // [1, 1024]; required
  int32_t head_v_dim = 0;         // [1, 1024]; required
  int32_t conv_size = 4;          // taps of the short convolutions, [2, 64]. Default: 4
  bool conv_bias = false;         // biases on the short convolutions. Default: false
  bool use_gate = true;           // the output gate g_proj. Default: true
  bool allow_neg_eigval = false;  // β in (0, 2) instead of (0, 1). Default: false
  double norm_eps = 1e-5;         // the output norm's eps. Default: 1e-5

  static GatedDeltaNetParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // The layer as the backends' delta-rule mixer reads it (decay and β on).
  DeltaRuleShape Shape() const;
};

const MixerKind& GatedDeltaNetKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_GATED_DELTA_NET_H_
