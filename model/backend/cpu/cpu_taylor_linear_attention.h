// The taylor_linear_attention mixer (model/layers/taylor_linear_attention.h) on the CPU: the
// q/k/v GEMMs over all rows of a pass, the Taylor feature map once per token and head, the
// linear-attention recurrence over F = 1 + d_f + d_f² features per session (chunked for prefill,
// one step for decode: kernels/cpu/linear_attention.h) and o_proj added to the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_TAYLOR_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_TAYLOR_LINEAR_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuTaylorLinearAttention(const CpuLayerContext& context,
                                                         const ComponentSpec& spec,
                                                         const LayerWeights& weights,
                                                         int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_TAYLOR_LINEAR_ATTENTION_H_
