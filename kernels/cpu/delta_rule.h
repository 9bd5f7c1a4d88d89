// The delta rule's recurrence on the CPU (gated_delta_net, model/layers/gated_delta_net.h): one
// token of one value head, and the norms around it. Decode and prefill both run these, token by
// token, so a prefill chunk leaves bitwise the state its tokens fed one at a time leave.
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

// o ← o / sqrt(mean(o²) + eps) · weight (· silu(gate) when gate is not null), over n values.
void GatedRmsNorm(float* o, int64_t n, const float* weight, const float* gate, float eps);

}  // namespace linserve::cpu

#endif  // LINSERVE_KERNELS_CPU_DELTA_RULE_H_
