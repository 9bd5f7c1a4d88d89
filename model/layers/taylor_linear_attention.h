// The "taylor_linear_attention" mixer (Based's LinearAttention with its TaylorExp feature map):
//   q, k = x Wq, x Wk   split into n_heads × feature_dim;   v = x Wv   split into n_heads × head_dim
//   φ(x) = [1, x / d_f^¼, vec(x xᵀ) / (√2·√d_f)]   (d_f = feature_dim; vec row-major), so
//   F = 1 + d_f + d_f² features and φ(q)·φ(k) = 1 + q·k/√d_f + (q·k)²/(2·d_f)
//   per head:  S += φ(k_t) v_tᵀ,  z += φ(k_t)   (the current token first), then
//              o_t = φ(q_t)ᵀ S / (φ(q_t)ᵀ z + eps)
//   out = concat_heads(o_t) Wo
// Its state slice, per head: S (F × head_dim, row-major) then z (F). z[0] counts the tokens.
#ifndef LINSERVE_MODEL_LAYERS_TAYLOR_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_LAYERS_TAYLOR_LINEAR_ATTENTION_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

struct TaylorLinearAttentionParams {
  int32_t n_heads = 0;
  int32_t feature_dim = 0;  // d_f: the width of each head's q and k
  int32_t head_dim = 0;     // the width of each head's v and output
  double eps = 1e-12;       // denominator guard

  static TaylorLinearAttentionParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // F = 1 + feature_dim + feature_dim².
  int64_t Features() const;
  // n_heads · F · (head_dim + 1).
  int64_t StateFloats() const;
};

const MixerKind& TaylorLinearAttentionKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_TAYLOR_LINEAR_ATTENTION_H_
