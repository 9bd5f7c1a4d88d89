// The CUDA implementation of the "delta_net" mixer (model/layers/delta_net.h): the delta-rule
// mixer (cuda_delta_rule_mixer.h) without the decay.

#include "model/backend/cuda/cuda_delta_rule_mixer.h"
#include "model/layers/delta_net.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfDeltaNet(const ComponentSpec& spec) {
  return CudaTensorsOfDeltaRule(DeltaNetParams::From(spec.params).Shape());
}

std::unique_ptr<CudaMixer> CreateCudaDeltaNet(const CudaLayerContext& context,
                                              const ComponentSpec& spec,
                                              const CudaLayerWeights& weights,
                                              int64_t state_offset) {
  return CreateCudaDeltaRuleMixer(context, DeltaNetParams::From(spec.params).Shape(), weights,
                                  state_offset);
}

}  // namespace linserve
