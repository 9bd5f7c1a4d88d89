// The delta-rule mixer on CUDA, shared by the kinds gated_delta_net and delta_net
// (model/layers/delta_rule_shape.h): each kind's file builds its DeltaRuleShape and calls these.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_DELTA_RULE_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_DELTA_RULE_MIXER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/delta_rule_shape.h"

namespace linserve {

// The device groups: "in" (q, k, v, then a, b and g where the layer has them, one fused matrix),
// "conv" and "conv_bias" (q | k | v's taps and biases, fp32), "A_log" and "dt_bias" (the decay),
// "o_norm", "o".
std::vector<CudaTensorGroup> CudaTensorsOfDeltaRule(const DeltaRuleShape& shape);

std::unique_ptr<CudaMixer> CreateCudaDeltaRuleMixer(const CudaLayerContext& context,
                                                    const DeltaRuleShape& shape,
                                                    const CudaLayerWeights& weights,
                                                    int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_DELTA_RULE_MIXER_H_
