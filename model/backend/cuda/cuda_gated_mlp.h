// The CUDA implementation of the "gated_mlp" MLP (model/layers/gated_mlp.h): fc1 GEMM (value and
// gate, 2·d_ff wide), bias + value ⊙ act(gate) rounded to the weight type, fc2 GEMM.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_MLP_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_MLP_H_

#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMlp> CreateCudaGatedMlp(const CudaLayerContext& context,
                                            const ComponentSpec& spec,
                                            const CudaLayerWeights& weights);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_GATED_MLP_H_
