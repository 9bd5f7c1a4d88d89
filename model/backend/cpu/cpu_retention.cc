// The retention mixer (model/layers/retention.h) on the CPU: the gated linear-attention mixer
// (cpu_gated_linear_attention_mixer.h) with RetNet's fixed decay and RoPE's turn.

#include "model/backend/cpu/cpu_gated_linear_attention_mixer.h"
#include "model/layers/retention.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuRetention(const CpuLayerContext& context,
                                             const ComponentSpec& spec, const LayerWeights& weights,
                                             int64_t state_offset) {
  return CreateCpuGatedLinearAttentionMixer(context, RetentionParams::From(spec.params).Shape(),
                                            weights, state_offset);
}

}  // namespace linserve
