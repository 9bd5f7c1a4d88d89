// The "mamba2" mixer (Mamba-2's SSD layer, Dao & Gu 2024, "Transformers are SSMs", as
// flash-linear-attention's Mamba2 layer defines it; docs/model-format.md): a selective state space
// with a scalar data-dependent decay per head, in linear attention's terms S ← a S + B (dt x)ᵀ,
// y = Sᵀ C. For one token u (d_model), d_inner = n_heads · head_dim, G = n_groups, N =
// state_size:
//   z | xBC | dt_raw = u W_in (+ b_in with bias)     widths d_inner | d_inner + 2·G·N | n_heads
//   xBC ← silu(conv(xBC) (+ conv bias))              a causal depthwise convolution of conv_size
//   x | B | C = xBC                                  widths d_inner | G·N | G·N
//   per head h of group g = h / (n_heads / G) (S: N × head_dim):
//     dt = clamp(softplus(dt_raw_h + dt_bias_h), dt_limit_min, dt_limit_max)
//     S ← exp(−exp(A_log_h) · dt) S + B_g (dt x_h)ᵀ;  y_h = Sᵀ C_g + D_h ⊙ x_h
//         (D per head, or per channel with d_has_hdim)
//   y ← rmsnorm_grouped(y ⊙ silu(z)) ⊙ norm      (norm_before_gate: rmsnorm_grouped(y) ⊙ norm ⊙
//                                                  silu(z); without rmsnorm: y ⊙ silu(z))
//       rmsnorm_grouped: over G groups of d_inner / G consecutive channels, eps norm_eps
//   out = y W_out (+ b_out with bias)
// The log decay −exp(A_log)·dt has the floor −1e4 as the delta rule's (a NaN taken as it).
//
// Its state slice: per head S (state_size × head_dim, row-major; fla keeps [head_dim,
// state_size]), then the convolution's history: the last conv_size − 1 rows of xBC before the
// convolution, oldest first: (conv_size − 1) × (d_inner + 2·G·N) floats.
#ifndef LINSERVE_MODEL_LAYERS_MAMBA2_H_
#define LINSERVE_MODEL_LAYERS_MAMBA2_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

struct Mamba2Params {
  int32_t n_heads = 0;            // [1, 1024]; required
  int32_t head_dim = 0;           // P, [1, 1024]; required
  int32_t state_size = 0;         // N, [1, 1024]; required
  int32_t n_groups = 1;           // B/C groups, dividing n_heads, [1, 1024]. Default: 1
  int32_t conv_size = 4;          // taps, [2, 64]. Default: 4
  bool conv_bias = true;          // a bias on the convolution. Default: true
  bool bias = false;              // biases on in_proj and out_proj. Default: false
  bool d_has_hdim = false;        // D per channel instead of per head. Default: false
  bool rmsnorm = true;            // the grouped gated RMSNorm. Default: true
  bool norm_before_gate = false;  // norm, then the gate. Default: false
  double dt_limit_min = 0;        // dt's floor, [0, 1e30]. Default: 0
  double dt_limit_max = 1e30;     // dt's ceiling, [0, 1e30]. Default: 1e30 (fla's inf)
  double norm_eps = 1e-5;         // (0, 1]. Default: 1e-5

  static Mamba2Params From(const ParamValues& values);
  ParamValues ToValues() const;

  int64_t InnerDim() const { return int64_t{n_heads} * head_dim; }
  int64_t GroupStateDim() const { return int64_t{n_groups} * state_size; }
  // Channels of the convolution: x | B | C.
  int64_t ConvChannels() const { return InnerDim() + 2 * GroupStateDim(); }
  // Columns of in_proj: z | xBC | dt.
  int64_t InColumns() const { return InnerDim() + ConvChannels() + n_heads; }
  // Floats of the S matrices; the convolution's history follows.
  int64_t HistoryOffset() const { return int64_t{n_heads} * state_size * head_dim; }
  int64_t StateFloats() const {
    return HistoryOffset() + (int64_t{conv_size} - 1) * ConvChannels();
  }
};

// The least log decay a token keeps (as kDeltaRuleMinLogDecay): e^-1e4 is 0 in fp32.
inline constexpr float kMamba2MinLogDecay = -1e4f;

const MixerKind& Mamba2Kind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_MAMBA2_H_
