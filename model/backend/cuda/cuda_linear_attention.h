// The CUDA implementation of the "linear_attention" mixer (model/layers/linear_attention.h):
// one fused q/k/v GEMM, the attention kernels of kernels/cuda/linear_attention.h on the layer's
// state slice (the recurrent form for decode, the chunked form per prefill piece), then o_proj.
// The same mixer serves every kind that is this recurrence with another feature map
// (CreateCudaAttentionMixer; taylor_linear_attention is one).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "kernels/cuda/linear_attention.h"
#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

// The linear-attention mixer of kernel shape `shape` over the groups of CudaQkvoTensors("attn"):
// "qkv" holds the rows of q (H·key_dim), k (H·key_dim) and v (H·head_dim), "qkv_bias" their
// bias (or none), "o" / "o_bias" the output projection. Check() is cuda::CheckAttentionShape.
std::unique_ptr<CudaMixer> CreateCudaAttentionMixer(const CudaLayerContext& context,
                                                    const cuda::AttentionShape& shape,
                                                    const CudaLayerWeights& weights,
                                                    int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_
