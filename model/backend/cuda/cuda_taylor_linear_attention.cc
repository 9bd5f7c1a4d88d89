// The CUDA implementation of the "taylor_linear_attention" mixer
// (model/layers/taylor_linear_attention.h): the linear-attention mixer of
// cuda_linear_attention.h with the Taylor feature map, q and k feature_dim wide per head and v
// head_dim wide, so F = 1 + feature_dim + feature_dim² rows of S per head. No bias (the kind has
// none).

#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_linear_attention.h"
#include "model/backend/cuda/cuda_projected_mixer.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfTaylorLinearAttention(const ComponentSpec&) {
  return CudaQkvoTensors("attn");
}

std::unique_ptr<CudaMixer> CreateCudaTaylorLinearAttention(const CudaLayerContext& context,
                                                           const ComponentSpec& spec,
                                                           const CudaLayerWeights& weights,
                                                           int64_t state_offset) {
  const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(spec.params);
  cuda::AttentionShape shape;
  shape.heads = p.n_heads;
  shape.key_dim = p.feature_dim;
  shape.head_dim = p.head_dim;
  shape.feature_dim = static_cast<int>(p.Features());
  shape.feature_map = cuda::FeatureMapKind::kTaylor;
  shape.eps = static_cast<float>(p.eps);
  return CreateCudaAttentionMixer(context, shape, weights, state_offset);
}

}  // namespace linserve
