// The CUDA implementation of the "taylor_linear_attention" mixer
// (model/layers/taylor_linear_attention.h): the linear-attention mixer of
// cuda_linear_attention.h with the Taylor feature map, q and k feature_dim wide per head and v
// head_dim wide, so F = 1 + feature_dim + feature_dim² rows of S per head. No bias (the kind has
// none).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_TAYLOR_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_TAYLOR_LINEAR_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMixer> CreateCudaTaylorLinearAttention(const CudaLayerContext& context,
                                                           const ComponentSpec& spec,
                                                           const CudaLayerWeights& weights,
                                                           int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_TAYLOR_LINEAR_ATTENTION_H_
