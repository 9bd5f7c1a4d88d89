// GatedLinearAttentionShape: what the kinds with a gated linear-attention state have in common
// (gated_linear_attention and retention), as their CPU and CUDA implementations read it. Both
// project q, k, v (and the output gate g), optionally run silu short convolutions on q | k | v,
// and per head update S ← diag(α) R S + k vᵀ, o = Sᵀ q / sqrt(k_dim), then a per-head RMSNorm
// (gated by silu(g_proj(x)) with the output gate). α per key channel is exp(gk): GLA's
// data-dependent gk = max(logsigmoid(gk_proj(x)) / normalizer, clamp_min), or RetNet's fixed
// decay per head γ_h = 1 − 2^(−5−h). R is the identity, or with `rotary` RetNet's rotation in the
// state's frame: the state is kept relative to the current token (S = R_tᵀ Σ_s γ^(t−s) (R_s k_s)
// v_sᵀ with R_t RoPE's rotation by t·θ, GPT-NeoX pairs c and c + k_dim/2, θ_c =
// rope_base^(−2c/k_dim)), so each token turns S by −θ (R = R_−1) and q needs no position: q_tᵀ S
// is (R_t q_t)ᵀ (Σ_s γ^(t−s) R_s k_s v_sᵀ), RoPE's scores. The state slice: per head S (k_dim ×
// v_dim, row-major), then with the short convolutions their last conv_size − 1 inputs of q | k | v.
#ifndef LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_SHAPE_H_
#define LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_SHAPE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "model/layers/component_kind.h"

namespace linserve {

struct GatedLinearAttentionShape {
  enum class Gate {
    kLowRank,    // GLA: gk from gk_proj (rank, normalizer, clamp_min)
    kRetention,  // RetNet: log γ_h per head, fixed
  };
  int32_t heads = 0;
  int32_t k_dim = 0;  // per head
  int32_t v_dim = 0;  // per head
  Gate gate = Gate::kLowRank;
  int32_t rank = 16;
  double normalizer = 16;
  double clamp_min = -1e4;
  bool rotary = false;  // R: RoPE's rotation in the state's frame (k_dim even)
  double rope_base = 10000;
  bool short_conv = false;
  int32_t conv_size = 4;
  bool conv_bias = false;
  bool output_gate = true;
  double norm_eps = 1e-5;

  int64_t KeyDim() const { return int64_t{heads} * k_dim; }
  int64_t ValueDim() const { return int64_t{heads} * v_dim; }
  // Channels of the short convolutions (0 without them): 2 · KeyDim() + ValueDim().
  int64_t ConvChannels() const { return short_conv ? 2 * KeyDim() + ValueDim() : 0; }
  // Floats of the S matrices; the convolutions' history follows.
  int64_t HistoryOffset() const { return int64_t{heads} * k_dim * v_dim; }
  int64_t StateFloats() const {
    return HistoryOffset() + (short_conv ? (int64_t{conv_size} - 1) * ConvChannels() : 0);
  }
};

// The least log gate gk a channel keeps (GLA's clamp_min default): e^-1e4 is 0 in fp32 and fp64
// as e^-inf is, while the chunked prefill's differences of cumulative gates stay finite.
inline constexpr double kGlaMinLogGate = -1e4;

// RetNet's log decay of head h: log(1 − 2^(−5−h)), in double (fla's chunk_retention).
double RetentionLogDecay(int64_t head);

// The tensors under "attn.", in fla's names: q/k/v_proj, gk_proj.0 and gk_proj.1 (+ bias) with
// the low-rank gate, g_proj with the output gate, q/k/v_conv1d.weight [channels, conv_size] (and
// .bias) with the short convolutions, g_norm.weight [v_dim], o_proj; no other biases.
std::vector<TensorDecl> GatedLinearAttentionTensors(const GatedLinearAttentionShape& shape,
                                                    int64_t d_model);

// Where `index` lies in the slice: "head 1, S[2][3]" or "k of token t-0 (history row 2),
// channel 5".
std::string LocateGatedLinearAttentionState(const GatedLinearAttentionShape& shape, int64_t index);

// The slice's layout, for the docs.
inline constexpr const char* kGatedLinearAttentionStateLayout =
    "per head S (head_k_dim × head_v_dim, row-major); then, with use_short_conv, the last "
    "conv_size − 1 inputs of q | k | v before their convolutions, oldest first: (conv_size − "
    "1) × (2 · key_dim + value_dim)";

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_GATED_LINEAR_ATTENTION_SHAPE_H_
