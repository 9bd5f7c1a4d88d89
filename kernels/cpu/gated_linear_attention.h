// Gated linear attention's recurrence on the CPU (the kinds gated_linear_attention and retention,
// model/layers/gated_linear_attention_shape.h): one token of one head (decode) and a chunk of
// tokens in the chunked form (prefill), on S [k_dim, v_dim] (row-major) with a log gate per key
// channel and, for retention, RoPE's rotation kept in the state's frame.
#ifndef LINSERVE_KERNELS_CPU_GATED_LINEAR_ATTENTION_H_
#define LINSERVE_KERNELS_CPU_GATED_LINEAR_ATTENTION_H_

#include <cstdint>
#include <vector>

namespace linserve::cpu {

// RoPE's turns in the state's frame: R_m turns the pair of channels (c, c + k_dim/2) by m · θ_c
// (x_c ← x_c cos − x_(c+h) sin, x_(c+h) ← x_(c+h) cos + x_c sin, GPT-NeoX's rotate_half). cos and
// sin hold cos(m·θ_c) and sin(m·θ_c) for m in [−kMaxTurns, kMaxTurns], row m + kMaxTurns of
// k_dim/2 values each (RotationTable builds them, in double).
struct Rotation {
  static constexpr int kMaxTurns = 64;
  std::vector<float> cos, sin;
};
// θ_c = base^(−2c/k_dim) for the k_dim/2 pairs.
Rotation RotationTable(int64_t k_dim, double base);

// One token: S ← diag(exp(gk)) R S + k vᵀ;  o = Sᵀq  (q already scaled), R the identity
// without `rotation`, R_−1 with it (gk then equal on each pair of channels). Channel c's log gate
// is gk[c · g_step]: g_step 1 reads one per channel, 0 one for all (Mamba-2's scalar decay). o
// must not overlap the inputs.
void GatedLinearAttentionStep(const float* q, const float* k, const float* v, const float* gk,
                              int64_t g_step, const Rotation* rotation, int64_t k_dim,
                              int64_t v_dim, float* s, float* o);

// Floats of scratch GatedLinearAttentionChunk needs for chunks of up to `chunk` tokens.
int64_t GatedLinearAttentionChunkScratchFloats(int chunk, int64_t k_dim);

// n tokens, equal to n GatedLinearAttentionStep calls up to rounding, and bitwise for n = 1,
// which runs the step. For n > 1 the chunked form
// (reference/linserve_ref/gated_linear_attention.py) with b = cumsum(gk) per channel and every
// exponent ≤ 0:
//   o_i = (q_i ⊙ exp(b_i)) S + Σ_{j≤i} A_ij v_j,  A_ij = Σ_c q_ic k_jc exp(b_ic − b_jc),
//   S ← diag(exp(b_last)) S + Σ_j (k_j ⊙ exp(b_last − b_j)) v_jᵀ.
// A is formed in blocks of 16 tokens: a block's pairs with earlier blocks as one product on Gemm
// relative to the block's first token r (q_i ⊙ exp(b_i − b_r) times k_j ⊙ exp(b_r − b_j)), its
// pairs within the block one by one. Token i's q and k are at q + i·ld_qk and k + i·ld_qk, its v
// at v + i·ld_v, its log gates at gk + i·ld_g (channel c's at c · g_step); its output goes to
// o + i·ld_o. Each gk ≥ −1e4
// (the kind's floor keeps the cumulative sums finite). With one gate for every channel (g_step 0)
// and no rotation, the pairs' decays factor out: A = (Q Kᵀ) ⊙ exp(b_i − b_j) on Gemm. With
// `rotation` (n ≤ kMaxTurns), token i
// of the chunk is i steps after the state's frame: its scores use R_i q_i and R_j k_j, the carried
// S is read by R_(i+1) q_i, and the state leaves as R_−n S plus R_(j−n+1) k_j vᵀ's.
void GatedLinearAttentionChunk(int n, int64_t k_dim, int64_t v_dim, const float* q, const float* k,
                               int64_t ld_qk, const float* v, int64_t ld_v, const float* gk,
                               int64_t ld_g, int64_t g_step, const Rotation* rotation, float* s,
                               float* o, int64_t ld_o, float* scratch);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_GATED_LINEAR_ATTENTION_H_
