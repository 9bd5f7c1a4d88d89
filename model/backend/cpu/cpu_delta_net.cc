// The delta_net mixer (model/layers/delta_net.h) on the CPU: the delta-rule mixer
// (cpu_delta_rule_mixer.h) without the decay.

#include "model/backend/cpu/cpu_delta_rule_mixer.h"
#include "model/layers/delta_net.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuDeltaNet(const CpuLayerContext& context,
                                            const ComponentSpec& spec, const LayerWeights& weights,
                                            int64_t state_offset) {
  return CreateCpuDeltaRuleMixer(context, DeltaNetParams::From(spec.params).Shape(), weights,
                                 state_offset);
}

}  // namespace linserve
