// The CUDA implementation of the "linear_attention" mixer (model/layers/linear_attention.h):
// one fused q/k/v GEMM, the attention kernels of kernels/cuda/linear_attention.h on the layer's
// state slice (the recurrent form for decode, the chunked form per prefill piece), then o_proj.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMixer> CreateCudaLinearAttention(const CudaLayerContext& context,
                                                     const ComponentSpec& spec,
                                                     const CudaLayerWeights& weights,
                                                     int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_LINEAR_ATTENTION_H_
