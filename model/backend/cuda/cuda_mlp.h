// The MLP of every MLP kind on CUDA, written once (as cpu_mlp.h on the CPU): the fc1 GEMM into
// fp32 scratch, one kernel for fc1's bias and the step, writing the hidden rows in the weights'
// type, and the fc2 GEMM into act.proj (fc2's bias is the following norm's to add). The step is
// an activation (ffn: act(fc1 + bias)) or a gate (gated_mlp: fc1 + bias gives value and gate,
// 2·d_ff wide, and the step is value ⊙ act(gate)).
#ifndef LINSERVE_MODEL_BACKEND_CUDA_CUDA_MLP_H_
#define LINSERVE_MODEL_BACKEND_CUDA_CUDA_MLP_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/elementwise.h"
#include "model/backend/cuda/cuda_layer.h"

namespace linserve {

enum class CudaMlpStep { kActivation, kGate };

// The device groups of the MLP over `<prefix>.fc1` and `<prefix>.fc2`: "fc1", "fc1_bias", "fc2",
// "fc2_bias".
std::vector<CudaTensorGroup> CudaTwoLayerMlpTensors(const std::string& prefix);

// Over the groups of CudaTwoLayerMlpTensors, d_ff hidden units.
std::unique_ptr<CudaMlp> CreateCudaTwoLayerMlp(const CudaLayerContext& context,
                                               const CudaLayerWeights& weights, int64_t d_ff,
                                               CudaMlpStep step, cuda::ActivationKind activation);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CUDA_CUDA_MLP_H_
