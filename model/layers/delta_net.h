// The "delta_net" mixer (DeltaNet, Yang et al. 2024, "Parallelizing Linear Transformers with the
// Delta Rule over Sequence Length", as flash-linear-attention's DeltaNet layer defines it with its
// defaults qk_activation silu and qk_norm l2; docs/model-format.md): the delta rule without a
// decay. For one token x (d_model):
//   q, k, v = silu(conv_q(x Wq)), silu(conv_k(x Wk)), silu(conv_v(x Wv))   causal depthwise
//             convolutions of conv_size taps (+ their biases with conv_bias)
//   per head h:
//     q̂ = q_h / sqrt(Σ q_h² + 1e-6) / sqrt(head_k_dim),  k̂ = k_h / sqrt(Σ k_h² + 1e-6)
//     β = sigmoid(x Wb)_h with use_beta, else 1 (either · 2 with allow_neg_eigval)
//     u = β (v_h − Sᵀk̂);  S ← S + k̂ uᵀ;  o_h = Sᵀq̂      (S: head_k_dim × head_v_dim)
//     o_h ← o_h / sqrt(mean(o_h²) + norm_eps) ⊙ o_norm ⊙ silu((x Wg)_h)
//         (without use_gate: no silu factor)
//   out = concat_h(o_h) Wo
// No biases on the projections (fla has none). The backends run it as the delta-rule mixer of
// gated_delta_net with the decay off (model/layers/delta_rule_shape.h).
//
// Its state slice: per head S (head_k_dim × head_v_dim, row-major), then the convolutions'
// history: the last conv_size − 1 inputs of q | k | v (before the convolution), oldest first.
#ifndef LINSERVE_MODEL_LAYERS_DELTA_NET_H_
#define LINSERVE_MODEL_LAYERS_DELTA_NET_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/delta_rule_shape.h"
#include "model/layers/param.h"

namespace linserve {

struct DeltaNetParams {
  int32_t n_heads = 0;            // [1, 1024]; required
  int32_t head_k_dim = 0;         // [1, 1024]; required
  int32_t head_v_dim = 0;         // [1, 1024]; required
  int32_t conv_size = 4;          // taps of the short convolutions, [2, 64]. Default: 4
  bool conv_bias = false;         // biases on the short convolutions. Default: false
  bool use_beta = true;           // β from b_proj; else 1. Default: true
  bool use_gate = false;          // the output gate g_proj. Default: false
  bool allow_neg_eigval = false;  // β doubled. Default: false
  double norm_eps = 1e-5;         // the output norm's eps. Default: 1e-5

  static DeltaNetParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // The layer as the backends' delta-rule mixer reads it (no decay; value heads = heads).
  DeltaRuleShape Shape() const;
};

const MixerKind& DeltaNetKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_DELTA_NET_H_
