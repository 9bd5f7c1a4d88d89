// The CUDA implementation of the "ffn" MLP (model/layers/ffn.h): fc1 GEMM, bias + activation
// rounded to the weight type, fc2 GEMM.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_FFN_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_FFN_H_

#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMlp> CreateCudaFfn(const CudaLayerContext& context, const ComponentSpec& spec,
                                       const CudaLayerWeights& weights);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_FFN_H_
