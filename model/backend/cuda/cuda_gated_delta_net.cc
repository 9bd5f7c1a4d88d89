// The CUDA implementation of the "gated_delta_net" mixer (model/layers/gated_delta_net.h): the
// delta-rule mixer (cuda_delta_rule_mixer.h) with the decay and β.

#include "model/backend/cuda/cuda_delta_rule_mixer.h"
#include "model/layers/gated_delta_net.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfGatedDeltaNet(const ComponentSpec& spec) {
  return CudaTensorsOfDeltaRule(GatedDeltaNetParams::From(spec.params).Shape());
}

std::unique_ptr<CudaMixer> CreateCudaGatedDeltaNet(const CudaLayerContext& context,
                                                   const ComponentSpec& spec,
                                                   const CudaLayerWeights& weights,
                                                   int64_t state_offset) {
  return CreateCudaDeltaRuleMixer(context, GatedDeltaNetParams::From(spec.params).Shape(), weights,
                                  state_offset);
}

}  // namespace linserve
