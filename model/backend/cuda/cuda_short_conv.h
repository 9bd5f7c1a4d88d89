// The CUDA implementation of the "short_conv" mixer (model/layers/short_conv.h, Based's
// BaseConv): the in_proj GEMM, the fused bias + causal depthwise convolution + silu + gate of
// kernels/cuda/short_conv.h on the layer's state slice (one launch over the decode rows, one per
// prefill piece), then out_proj.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_SHORT_CONV_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_SHORT_CONV_H_

#include <cstdint>
#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMixer> CreateCudaShortConv(const CudaLayerContext& context,
                                               const ComponentSpec& spec,
                                               const CudaLayerWeights& weights,
                                               int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_SHORT_CONV_H_
