// The delta rule's recurrence on the CPU (the kinds gated_delta_net and delta_net,
// model/layers/delta_rule_shape.h; delta_net's is the decay-free case, g = 0): one token of one
// value head (decode), a chunk of tokens in the WY form (prefill), and q's and k's L2 norm.
#ifndef LINSERVE_KERNELS_CPU_DELTA_RULE_H_
#define LINSERVE_KERNELS_CPU_DELTA_RULE_H_

#include <cstdint>

namespace linserve::cpu {

// x ← x / sqrt(Σ x² + eps) · scale over n values (fla's l2norm, then the query's scale).
void L2Normalize(float* x, int64_t n, float eps, float scale);

// One token of the gated delta rule on S [k_dim, v_dim] (row-major):
//   S ← decay · S;  u = beta · (v − Sᵀk);  S ← S + k uᵀ;  o = Sᵀq
// q and k are already normalised; `scratch` holds v_dim floats. o must not overlap the inputs.
void GatedDeltaRuleStep(const float* q, const float* k, const float* v, float decay, float beta,
                        int64_t k_dim, int64_t v_dim, float* s, float* o, float* scratch);

// Floats of scratch GatedDeltaRuleChunk needs for chunks of up to `chunk` tokens.
int64_t GatedDeltaRuleChunkScratchFloats(int chunk, int64_t k_dim, int64_t v_dim);

// n tokens of the gated delta rule on S [k_dim, v_dim], equal to n GatedDeltaRuleStep calls (with
// decay exp(g[i])) up to rounding, and bitwise for n = 1, which runs the step. For n > 1 the WY
// form (reference/linserve_ref/delta_rule.py): with b = cumsum(g), Γ_ij = exp(b_i − b_j),
// T = (I + strict_lower(diag(β) K Kᵀ ⊙ Γ))⁻¹ by forward substitution, W = T (K ⊙ β exp(b)),
// U = T (V ⊙ β); u = U − W S, o = (Q ⊙ exp(b)) S + (Q Kᵀ ⊙ Γ ⊙ lower) u,
// S ← exp(b_last) S + (K ⊙ exp(b_last − b))ᵀ u — products on Gemm (blas.h).
// Token i's q and k are at q + i·ld_qk and k + i·ld_qk (normalised), v at v + i·ld_v, its β and
// log decay at beta[i] and g[i]; its output (before the norm) goes to o + i·ld_o.
void GatedDeltaRuleChunk(int n, int64_t k_dim, int64_t v_dim, const float* q, const float* k,
                         int64_t ld_qk, const float* v, int64_t ld_v, const float* beta,
                         const float* g, float* s, float* o, int64_t ld_o, float* scratch);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_DELTA_RULE_H_
