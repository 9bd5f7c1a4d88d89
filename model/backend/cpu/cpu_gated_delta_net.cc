// The gated_delta_net mixer (model/layers/gated_delta_net.h) on the CPU: the delta-rule mixer
// (cpu_delta_rule_mixer.h) with the decay and β.

#include "model/backend/cpu/cpu_delta_rule_mixer.h"
#include "model/layers/gated_delta_net.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuGatedDeltaNet(const CpuLayerContext& context,
                                                 const ComponentSpec& spec,
                                                 const LayerWeights& weights,
                                                 int64_t state_offset) {
  return CreateCpuDeltaRuleMixer(context, GatedDeltaNetParams::From(spec.params).Shape(), weights,
                                 state_offset);
}

}  // namespace linserve
