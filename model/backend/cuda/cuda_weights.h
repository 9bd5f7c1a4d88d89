// CudaWeights: a model's weights on the device, uploaded once into one allocation. Matrices are
// stored in BackendOptions::weight_precision, with q/k/v fused into one matrix (q rows, then k,
// then v; their biases into one vector) so that a mixer's projections are one GEMM; norm
// parameters, biases, the favor_plus projections and the short convolutions' depthwise kernels
// stay fp32. The embedding and LM head rows are padded to a multiple of 64 (padded_vocab.h).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_WEIGHTS_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_WEIGHTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "model/backend/backend.h"
#include "model/model.h"

namespace linserve {

// The element type of the device matrices for `precision` (auto: bf16).
cuda::DType WeightDType(WeightPrecision precision);

// One layer's tensors (model/layers/layer_weights.h names them); a tensor the layer's kinds do
// not declare, or an optional one the model lacks, is null. T is the weights' type.
struct CudaLayerWeights {
  const void* qkv_weight = nullptr;  // T [q rows + k rows + v rows, d]: q, then k, then v
  const float* qkv_bias = nullptr;   // [q rows + k rows + v rows] or null
  const void* o_weight = nullptr;
  const float* o_bias = nullptr;
  const void* fc1_weight = nullptr;
  const float* fc1_bias = nullptr;
  const void* fc2_weight = nullptr;
  const float* fc2_bias = nullptr;
  const float* ln1_weight = nullptr;
  const float* ln1_bias = nullptr;
  const float* ln2_weight = nullptr;
  const float* ln2_bias = nullptr;
  const float* favor = nullptr;
  const void* conv_in_weight = nullptr;  // T
  const float* conv_in_bias = nullptr;
  const float* conv_weight = nullptr;  // fp32 [d_inner, kernel] (short_conv)
  const float* conv_bias = nullptr;
  const void* conv_out_weight = nullptr;  // T
  const float* conv_out_bias = nullptr;
};

struct CudaWeights {
  cuda::DeviceBuffer buffer;  // every pointer below points into it
  std::vector<CudaLayerWeights> layers;
  // The embedding and the head have padded_vocab rows (padded_vocab.h), rows >= vocab zero.
  int64_t padded_vocab = 0;
  const void* embedding = nullptr;           // T [padded_vocab, d]
  const void* position_embedding = nullptr;  // T [max_position, d], learned positions only
  const void* head = nullptr;                // T [padded_vocab, d]: the embedding when tied
  const float* final_norm_weight = nullptr;  // pre-norm only
  const float* final_norm_bias = nullptr;
};

// Uploads `model`'s weights on `stream` (matrices through an fp32 staging buffer, rounded to
// `dtype` on the device) and waits for the copies. RESOURCE_EXHAUSTED, naming the weights, when
// they do not fit.
absl::StatusOr<CudaWeights> UploadWeights(const Model& model, cuda::DType dtype,
                                          cudaStream_t stream);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_WEIGHTS_H_
