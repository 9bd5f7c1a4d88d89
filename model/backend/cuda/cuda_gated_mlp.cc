// The CUDA implementation of the "gated_mlp" MLP (model/layers/gated_mlp.h): the two-layer MLP
// of cuda_mlp.h, fc1 giving value and gate (2·d_ff wide), bias + value ⊙ act(gate) rounded to
// the weight type between the GEMMs.

#include "kernels/cuda/elementwise.h"
#include "model/backend/cuda/cuda_mlp.h"
#include "model/layers/gated_mlp.h"

namespace linserve {
namespace {

cuda::ActivationKind ToKernel(GateActivation a) {
  switch (a) {
    case GateActivation::kSilu:
      return cuda::ActivationKind::kSilu;
    case GateActivation::kGelu:
      return cuda::ActivationKind::kGelu;
    case GateActivation::kSigmoid:
      return cuda::ActivationKind::kSigmoid;
  }
  return cuda::ActivationKind::kSilu;
}

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfGatedMlp(const ComponentSpec&) {
  return CudaTwoLayerMlpTensors("mlp");
}

std::unique_ptr<CudaMlp> CreateCudaGatedMlp(const CudaLayerContext& context,
                                            const ComponentSpec& spec,
                                            const CudaLayerWeights& weights) {
  const GatedMlpParams p = GatedMlpParams::From(spec.params);
  return CreateCudaTwoLayerMlp(context, weights, p.d_ff, CudaMlpStep::kGate,
                               ToKernel(p.activation));
}

}  // namespace linserve
