// The "none" MLP (model/layers/none.h) on CUDA: no MLP, no tensors (the layer holds null and the
// forward pass adds the mixer's output into the next norm).

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/none.h"

namespace linserve {

std::vector<CudaTensorGroup> CudaTensorsOfNone(const ComponentSpec&) { return {}; }

std::unique_ptr<CudaMlp> CreateCudaNone(const CudaLayerContext&, const ComponentSpec&,
                                        const CudaLayerWeights&) {
  return nullptr;
}

}  // namespace linserve
