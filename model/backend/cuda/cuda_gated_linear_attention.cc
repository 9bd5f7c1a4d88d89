// The CUDA implementation of the "gated_linear_attention" mixer
// (model/layers/gated_linear_attention.h): the gated linear-attention mixer
// (cuda_gated_linear_attention_mixer.h) with the low-rank gate.

#include "model/backend/cuda/cuda_gated_linear_attention_mixer.h"
#include "model/layers/gated_linear_attention.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfGatedLinearAttention(const ComponentSpec& spec) {
  return CudaTensorsOfGatedLinearAttentionMixer(
      GatedLinearAttentionParams::From(spec.params).Shape());
}

std::unique_ptr<CudaMixer> CreateCudaGatedLinearAttention(const CudaLayerContext& context,
                                                          const ComponentSpec& spec,
                                                          const CudaLayerWeights& weights,
                                                          int64_t state_offset) {
  return CreateCudaGatedLinearAttentionMixer(
      context, GatedLinearAttentionParams::From(spec.params).Shape(), weights, state_offset);
}

}  // namespace linserve
