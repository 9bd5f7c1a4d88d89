// The delta-rule mixer on the CPU, shared by the kinds gated_delta_net and delta_net
// (model/layers/delta_rule_shape.h): each kind's file builds its DeltaRuleShape and calls this.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_DELTA_RULE_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_DELTA_RULE_MIXER_H_

#include <cstdint>
#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/delta_rule_shape.h"

namespace linserve {

// A mixer reading the tensors DeltaRuleTensors(shape) declares from `weights` and its slice of
// each slot's state at `state_offset` floats.
std::unique_ptr<CpuMixer> CreateCpuDeltaRuleMixer(const CpuLayerContext& context,
                                                  const DeltaRuleShape& shape,
                                                  const LayerWeights& weights,
                                                  int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_DELTA_RULE_MIXER_H_
