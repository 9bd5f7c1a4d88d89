// The CUDA implementation of the "layer_norm" norm (model/layers/layer_norm.h), fused with the
// residual add before it (kernels/cuda/elementwise.h's LaunchAddNorm).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_NORM_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_NORM_H_

#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

// `scale` and `shift` are the instance's weight and bias on the device ([d_model] fp32).
std::unique_ptr<CudaNorm> CreateCudaLayerNorm(const CudaLayerContext& context,
                                              const ComponentSpec& spec, const float* scale,
                                              const float* shift);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_LAYER_NORM_H_
