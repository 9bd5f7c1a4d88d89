// Host-side launchers for the delta rule (gated_delta_net and delta_net,
// model/layers/delta_rule_shape.h) after its short convolutions: per token and value head, the L2
// norms of q and k, β and the decay (where the layer has them) from the projections' rows, the
// state update and read-out, and the gated RMSNorm, written in T as o_proj's input. Each block
// owns one value head of one session (a decode row, or a prefill piece whose tokens it runs in
// order), one thread per column of S; every product and sum of the update rounds as the CPU's
// decode step (kernels/cpu/delta_rule.h's GatedDeltaRuleStep), in the same order, except the
// norms' block-wide sums, expf and the softplus (logf by Goldberg's identity where the CPU calls
// log1p). Prefill runs that step token by token, not the CPU's WY form.
//
// State layout (the same as StateBlob and the CPU backend): per value head S (k_dim × v_dim fp32,
// row-major) at state + slot · slot_stride + layer_offset.
#ifndef LINSERVE_KERNELS_CUDA_DELTA_RULE_H_
#define LINSERVE_KERNELS_CUDA_DELTA_RULE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

struct GatedDeltaRuleShape {
  int heads = 0;    // q/k heads
  int v_heads = 0;  // value heads, a multiple of heads
  int k_dim = 0;    // per head
  int v_dim = 0;    // per value head
  bool allow_neg_eigval = false;
  float norm_eps = 0;
  float l2_eps = 0;
  float min_log_decay = 0;  // g below it (or NaN) is taken as it
  // [v_heads] each, or both null: no decay (S is not scaled).
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* o_norm = nullptr;  // [v_dim]
};

// The most k_dim and v_dim the kernels take (the delta-rule kinds' head_k_dim / head_v_dim limits).
constexpr int kMaxDeltaRuleHeadDim = 1024;

// INVALID_ARGUMENT unless the dims are in [1, kMaxDeltaRuleHeadDim], v_heads is a multiple of
// heads, o_norm is given and a_log and dt_bias are both given or both null.
absl::Status CheckGatedDeltaRuleShape(const GatedDeltaRuleShape& shape);

// What both launchers read and write.
struct GatedDeltaRuleRows {
  GatedDeltaRuleShape shape;
  // [rows, 2·heads·k_dim + v_heads·v_dim]: q | k | v after the convolutions.
  const float* qkv = nullptr;
  // The projections' rows ([rows, proj_stride]): a at column a_col (v_heads; read with the
  // decay), b at b_col (v_heads; b_col < 0: β = 1), and the gate at g_col (v_heads·v_dim;
  // g_col < 0: no gate).
  const float* proj = nullptr;
  int64_t proj_stride = 0;
  int64_t a_col = 0, b_col = -1, g_col = -1;
  float* state = nullptr;
  int64_t slot_stride = 0;   // floats per slot
  int64_t layer_offset = 0;  // floats from a slot's start to this layer's S
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, v_heads·v_dim]
};

// One token per row, each of a distinct slot (`slots`; a negative slot is padding: zero state,
// no write).
absl::Status LaunchDecodeGatedDeltaRule(cudaStream_t stream, const GatedDeltaRuleRows& args,
                                        const int32_t* slots, int rows);

// Every piece of a prefill pass (device tables), its tokens in order: equals feeding them one
// by one.
absl::Status LaunchPrefillGatedDeltaRule(cudaStream_t stream, const GatedDeltaRuleRows& args,
                                         const PrefillTables& tables);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DELTA_RULE_H_
