// The taylor_linear_attention mixer (model/layers/taylor_linear_attention.h) on the CPU: the
// linear-attention recurrence (cpu_linear_attention.h) over Based's Taylor feature map, computed
// once per token and head: F = 1 + d_f + d_f² features. No biases (the kind has none).

#include <utility>

#include "kernels/cpu/elementwise.h"
#include "model/backend/cpu/cpu_linear_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuTaylorLinearAttention(const CpuLayerContext& context,
                                                         const ComponentSpec& spec,
                                                         const LayerWeights& weights,
                                                         int64_t state_offset) {
  const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(spec.params);
  CpuFeatureMap phi = [dim = p.feature_dim](const float* x, int64_t vectors, float* out) {
    cpu::TaylorFeatureMap(x, vectors, dim, out);
  };
  return CreateCpuAttentionMixer(
      context, weights, state_offset,
      {p.n_heads, static_cast<int>(p.Features()), p.head_dim, static_cast<float>(p.eps)},
      std::move(phi));
}

}  // namespace linserve
