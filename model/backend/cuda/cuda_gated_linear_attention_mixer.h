// The gated linear-attention mixer on CUDA, shared by the kinds gated_linear_attention and
// retention (model/layers/gated_linear_attention_shape.h): each kind's file builds its
// GatedLinearAttentionShape and calls these.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_LINEAR_ATTENTION_MIXER_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_LINEAR_ATTENTION_MIXER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/gated_linear_attention_shape.h"

namespace linserve {

// The device groups: "in" (q, k, v, then gk_proj.0 and g where the layer has them, one fused
// matrix), "conv" and "conv_bias" (q | k | v's taps and biases, fp32), "gate_up" and "gate_bias"
// (gk_proj.1, fp32), "g_norm", "o".
std::vector<CudaTensorGroup> CudaTensorsOfGatedLinearAttentionMixer(
    const GatedLinearAttentionShape& shape);

std::unique_ptr<CudaMixer> CreateCudaGatedLinearAttentionMixer(
    const CudaLayerContext& context, const GatedLinearAttentionShape& shape,
    const CudaLayerWeights& weights, int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_LINEAR_ATTENTION_MIXER_H_
