// DeltaRuleShape: what the delta-rule mixer kinds (gated_delta_net, delta_net) have in common, as
// their CPU and CUDA implementations read it. Both project q, k, v (and, as the kind and its
// parameters say, the decay's a, β's b and the output gate g), run silu short convolutions on
// q | k | v, L2-normalise q (scaled by head_k_dim^-1/2) and k, and per value head update
// S ← α S, u = β (v − Sᵀk), S ← S + k uᵀ, o = Sᵀq, then a per-head RMSNorm (gated by
// silu(g_proj(x)) with the gate). α = exp(−exp(A_log) · softplus(a + dt_bias)) with the decay,
// else 1; β = sigmoid(b) (· 2 with allow_neg_eigval) with b_proj, else 1 (· 2). The state slice:
// per value head S (k_dim × v_dim, row-major), then the last conv_size − 1 inputs of q | k | v.
#ifndef LINSERVE_MODEL_LAYERS_DELTA_RULE_SHAPE_H_
#define LINSERVE_MODEL_LAYERS_DELTA_RULE_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "model/layers/component_kind.h"

namespace linserve {

struct DeltaRuleShape {
  int32_t heads = 0;    // q/k heads
  int32_t v_heads = 0;  // value heads, a multiple of heads
  int32_t k_dim = 0;    // per q/k head
  int32_t v_dim = 0;    // per value head
  int32_t conv_size = 4;
  bool conv_bias = false;
  bool decay = true;  // a_proj, A_log and dt_bias
  bool beta = true;   // b_proj
  bool gate = true;   // g_proj
  bool allow_neg_eigval = false;
  double norm_eps = 1e-5;

  int64_t KeyDim() const { return int64_t{heads} * k_dim; }
  int64_t ValueDim() const { return int64_t{v_heads} * v_dim; }
  // Channels of the short convolutions: 2 · KeyDim() + ValueDim().
  int64_t ConvChannels() const { return 2 * KeyDim() + ValueDim(); }
  // Floats of the S matrices; the convolutions' history follows.
  int64_t HistoryOffset() const { return int64_t{v_heads} * k_dim * v_dim; }
  int64_t StateFloats() const {
    return HistoryOffset() + (int64_t{conv_size} - 1) * ConvChannels();
  }
};

// The L2 norm's eps of q and k (inside the square root), fla's l2norm.
inline constexpr float kDeltaRuleL2Eps = 1e-6f;

// The least log decay g a token keeps, both backends: e^-1e4 is 0 in fp32 as e^−inf is, but a
// finite floor keeps the WY form's differences of cumulative decays finite (−inf − −inf is NaN),
// and it also stands for a NaN g (exp(A_log) overflowing while softplus underflows to 0).
inline constexpr float kDeltaRuleMinLogDecay = -1e4f;

// The tensors of a delta-rule layer under "attn.", in fla's names: q/k/v_proj, a_proj (decay),
// b_proj (beta), g_proj (gate), A_log and dt_bias (decay), q/k/v_conv1d.weight [channels,
// conv_size] (and .bias), o_norm.weight [v_dim], o_proj; no projection biases.
std::vector<TensorDecl> DeltaRuleTensors(const DeltaRuleShape& shape, int64_t d_model);

// Where `index` lies in the slice: "value head 1, S[2][3]" or "k of token t-0 (history row 2),
// channel 5".
std::string LocateDeltaRuleState(const DeltaRuleShape& shape, int64_t index);

// The slice's layout, for the docs.
inline constexpr const char* kDeltaRuleStateLayout =
    "per value head S (head_k_dim × head_v_dim, row-major); then the last conv_size − 1 inputs "
    "of q | k | v before their convolutions, oldest first: (conv_size − 1) × (2 · key_dim + "
    "value_dim)";

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_DELTA_RULE_SHAPE_H_
