#include "model/backend/cuda/cuda_taylor_linear_attention.h"

#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_linear_attention.h"
#include "model/layers/taylor_linear_attention.h"

namespace linserve {

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
