// Host-side launchers for gated linear attention (the kinds gated_linear_attention and retention,
// model/layers/gated_linear_attention_shape.h) after its projections (and short convolutions): per
// token and head, q's scale, the key gate (GLA's gk = max(logsigmoid(gk_proj.1(low) + bias) /
// normalizer, clamp_min) from the low-rank projection's row, or RetNet's log γ_h =
// log1p(−2^(−5−h)) in double), the state update S ← diag(exp(gk)) R S + k vᵀ (R: RoPE's turn by
// −θ_c on the pairs (c, c + k_dim/2) for retention, cos and sin of θ_c = base^(−2c/k_dim) in
// double, else the identity) and read-out o = Sᵀq, and the gated RMSNorm, written in T as
// o_proj's input. Each block owns one
// head of one session (a decode row, or a prefill piece whose tokens it runs in order), one thread
// per column of S; every product and sum of the update rounds as the CPU's decode step
// (kernels/cpu/gated_linear_attention.h's GatedLinearAttentionStep), in the same order, except
// the gate's dot product, the norm's block-wide sum, expf and log1p (by Goldberg's identity).
// Prefill runs that step token by token, not the CPU's chunked form.
//
// State layout (the same as StateBlob and the CPU backend): per head S (k_dim × v_dim fp32,
// row-major) at state + slot · slot_stride + layer_offset.
#ifndef LINSERVE_KERNELS_CUDA_GATED_LINEAR_ATTENTION_H_
#define LINSERVE_KERNELS_CUDA_GATED_LINEAR_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

struct GatedLinearAttentionShape {
  int heads = 0;
  int k_dim = 0;  // per head
  int v_dim = 0;  // per head
  int rank = 0;   // gk_proj's low rank
  float gate_logit_normalizer = 0;
  float clamp_min = 0;  // gk below it (or NaN) is taken as it
  float norm_eps = 0;
  // [heads·k_dim, rank] and [heads·k_dim]: gk_proj.1's weight and bias; both null: RetNet's fixed
  // decay per head instead.
  const float* gate_up = nullptr;
  const float* gate_bias = nullptr;
  bool rotary = false;  // RoPE's turn in the state's frame (k_dim even)
  double rope_base = 10000;
  const float* g_norm = nullptr;  // [v_dim]
};

// The most k_dim, v_dim and rank the kernels take (the kind's limits).
constexpr int kMaxGlaDim = 1024;

// INVALID_ARGUMENT unless the dims (and the rank, with the low-rank gate) are in [1, kMaxGlaDim],
// k_dim is even with the rotation, the normaliser is positive (with the low-rank gate), g_norm is
// given and gk_proj.1's weight and bias are both given or both null.
absl::Status CheckGatedLinearAttentionShape(const GatedLinearAttentionShape& shape);

// What both launchers read and write.
struct GatedLinearAttentionRows {
  GatedLinearAttentionShape shape;
  // [rows, qkv_stride]: q | k | v (heads·k_dim, heads·k_dim, heads·v_dim) from column 0.
  const float* qkv = nullptr;
  int64_t qkv_stride = 0;
  // The projections' rows ([rows, proj_stride]): the low-rank gate at low_col (rank; read with
  // gate_up), the output gate at g_col (heads·v_dim; g_col < 0: none).
  const float* proj = nullptr;
  int64_t proj_stride = 0;
  int64_t low_col = 0, g_col = -1;
  float* state = nullptr;
  int64_t slot_stride = 0;   // floats per slot
  int64_t layer_offset = 0;  // floats from a slot's start to this layer's S
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, heads·v_dim]
};

// One token per row, each of a distinct slot (`slots`; a negative slot is padding: zero state,
// no write).
absl::Status LaunchDecodeGatedLinearAttention(cudaStream_t stream,
                                              const GatedLinearAttentionRows& args,
                                              const int32_t* slots, int rows);

// Every piece of a prefill pass (device tables), its tokens in order: equals feeding them one
// by one.
absl::Status LaunchPrefillGatedLinearAttention(cudaStream_t stream,
                                               const GatedLinearAttentionRows& args,
                                               const PrefillTables& tables);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_GATED_LINEAR_ATTENTION_H_
