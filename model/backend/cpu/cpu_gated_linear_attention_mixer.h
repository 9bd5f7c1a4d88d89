// The gated linear-attention mixer on the CPU, shared by the kinds gated_linear_attention and
// retention (model/layers/gated_linear_attention_shape.h): each kind's file builds its
// GatedLinearAttentionShape and calls this.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_LINEAR_ATTENTION_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_LINEAR_ATTENTION_MIXER_H_

#include <cstdint>
#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/gated_linear_attention_shape.h"

namespace linserve {

// A mixer reading the tensors GatedLinearAttentionTensors(shape) declares from `weights` and its
// slice of each slot's state at `state_offset` floats.
std::unique_ptr<CpuMixer> CreateCpuGatedLinearAttentionMixer(const CpuLayerContext& context,
                                                             const GatedLinearAttentionShape& shape,
                                                             const LayerWeights& weights,
                                                             int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_LINEAR_ATTENTION_MIXER_H_
