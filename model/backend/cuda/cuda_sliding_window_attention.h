// The CUDA implementation of the "sliding_window_attention" mixer
// (model/layers/sliding_window_attention.h): one fused q/k/v GEMM, the kernels of
// kernels/cuda/sliding_window_attention.h on the layer's state slice (the ring of past keys and
// values; one decode launch over the batch, the prefill launches once for a pass's sessions),
// then o_proj.
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_SLIDING_WINDOW_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_SLIDING_WINDOW_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "model/backend/cuda/cuda_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CudaMixer> CreateCudaSlidingWindowAttention(const CudaLayerContext& context,
                                                            const ComponentSpec& spec,
                                                            const CudaLayerWeights& weights,
                                                            int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_SLIDING_WINDOW_ATTENTION_H_
