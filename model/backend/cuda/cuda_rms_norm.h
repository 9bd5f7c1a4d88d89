// The CUDA implementation of the "rms_norm" norm (model/layers/rms_norm.h), fused with the
// residual add before it (kernels/cuda/elementwise.h's LaunchAddNorm).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_RMS_NORM_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_RMS_NORM_H_

#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

// `scale` is the instance's weight on the device ([d_model] fp32).
std::unique_ptr<CudaNorm> CreateCudaRmsNorm(const CudaLayerContext& context,
                                            const ComponentSpec& spec, const float* scale);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_RMS_NORM_H_
