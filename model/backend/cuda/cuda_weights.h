// CudaWeights: a model's weights on the device, uploaded once into one allocation. Each layer's
// tensors are placed as its kinds' CUDA implementations group them (CudaTensorGroup: q/k/v fused
// into one matrix, q rows then k then v, their biases into one vector, so that a mixer's
// projections are one GEMM); matrices are stored in BackendOptions::weight_precision, norm
// parameters, biases, the favor_plus projections and the short convolutions' depthwise kernels
// fp32. The embedding and LM head rows are padded to a multiple of 64 (padded_vocab.h).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_WEIGHTS_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_WEIGHTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/dtype.h"
#include "model/backend/backend.h"
#include "model/model.h"

namespace linserve {

// The element type of the device matrices for `precision` (auto: bf16).
cuda::DType WeightDType(WeightPrecision precision);

// A device tensor of a layer: the layer's host tensors `tensors` (names under "layers.{i}.")
// placed one after another — the rows of one fused matrix, or one vector — a matrix in the
// weights' type, a vector fp32. A layer holds all of a group's tensors or none (a bias its config
// turns off): then the group is absent.
struct CudaTensorGroup {
  std::string name;  // its key in CudaLayerWeights, e.g. "qkv"
  std::vector<std::string> tensors;
  bool matrix = false;
};

// The groups of a layer of kinds `spec`: each norm tensor its own fp32 group named as the tensor
// ("ln1.weight"), then those its mixer's and MLP's CUDA implementations declare
// (CudaTensorsOf<Name>, cuda_layer.h). Defined in cuda_layer.cc, from the list of kinds.
std::vector<CudaTensorGroup> CudaTensorGroups(const LayerSpec& spec);

// One layer's device tensors, by group name.
struct CudaLayerWeights {
  std::map<std::string, const void*, std::less<>> groups;

  // The matrix (T) of group `name`, which the layer's kinds declare for this config: a miss is a
  // bug, so it aborts naming the group.
  const void* Matrix(std::string_view name) const;
  // The fp32 vector of group `name`, which the layer's kinds declare for this config (aborts
  // naming it otherwise, as Matrix).
  const float* RequiredVector(std::string_view name) const;
  // The fp32 vector of group `name`, or null when the layer has none (a bias turned off).
  const float* Vector(std::string_view name) const;
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
