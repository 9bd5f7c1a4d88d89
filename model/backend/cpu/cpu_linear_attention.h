// The linear_attention mixer (model/layers/linear_attention.h) on the CPU: the q/k/v GEMMs over
// all rows of a pass, φ, the recurrence per session (chunked for prefill, one step for decode)
// and the output projection added to the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuLinearAttention(const CpuLayerContext& context,
                                                   const ComponentSpec& spec,
                                                   const LayerWeights& weights,
                                                   int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_
