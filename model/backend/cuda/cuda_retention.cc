// The CUDA implementation of the "retention" mixer (model/layers/retention.h): the gated
// linear-attention mixer (cuda_gated_linear_attention_mixer.h) with RetNet's fixed decay and RoPE's
// turn.

#include "model/backend/cuda/cuda_gated_linear_attention_mixer.h"
#include "model/layers/retention.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfRetention(const ComponentSpec& spec) {
  return CudaTensorsOfGatedLinearAttentionMixer(RetentionParams::From(spec.params).Shape());
}

std::unique_ptr<CudaMixer> CreateCudaRetention(const CudaLayerContext& context,
                                               const ComponentSpec& spec,
                                               const CudaLayerWeights& weights,
                                               int64_t state_offset) {
  return CreateCudaGatedLinearAttentionMixer(context, RetentionParams::From(spec.params).Shape(),
                                             weights, state_offset);
}

}  // namespace linserve
