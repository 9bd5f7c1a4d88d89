// The linear-attention recurrence as a CPU mixer: q, k and v projected (CpuProjectedMixer), φ
// applied per token and head, S += φ(k)vᵀ and z += φ(k) per session (chunked for prefill, one
// step for decode: kernels/cpu/linear_attention.h), o_proj added to the residual. Every kind that
// is this recurrence with its own feature map is one of these (linear_attention,
// taylor_linear_attention), as on CUDA (cuda_linear_attention.h).
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/cpu/linear_attention.h"
#include "model/backend/cpu/cpu_layer.h"

namespace linserve {

// φ over `vectors` contiguous vectors of one head's q (or k) width, into `vectors` rows of
// shape.feature_dim floats; each output depends on its own vector alone, bit for bit.
using CpuFeatureMap = std::function<void(const float* x, int64_t vectors, float* phi)>;

// The mixer over the layer's attn.{q,k,v,o}_proj tensors (biases when it holds them), with the
// kernel shape `shape` (heads, F, head_dim of v, eps) and feature map `phi`.
std::unique_ptr<CpuMixer> CreateCpuAttentionMixer(const CpuLayerContext& context,
                                                  const LayerWeights& weights, int64_t state_offset,
                                                  const cpu::AttentionShape& shape,
                                                  CpuFeatureMap phi);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_LINEAR_ATTENTION_H_
