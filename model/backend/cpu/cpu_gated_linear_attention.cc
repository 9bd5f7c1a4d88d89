// The gated_linear_attention mixer (model/layers/gated_linear_attention.h) on the CPU: the gated
// linear-attention mixer (cpu_gated_linear_attention_mixer.h) with the low-rank gate.

#include "model/backend/cpu/cpu_gated_linear_attention_mixer.h"
#include "model/layers/gated_linear_attention.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuGatedLinearAttention(const CpuLayerContext& context,
                                                        const ComponentSpec& spec,
                                                        const LayerWeights& weights,
                                                        int64_t state_offset) {
  return CreateCpuGatedLinearAttentionMixer(
      context, GatedLinearAttentionParams::From(spec.params).Shape(), weights, state_offset);
}

}  // namespace linserve
