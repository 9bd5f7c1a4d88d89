// The CUDA implementation of the "ffn" MLP (model/layers/ffn.h): the two-layer MLP of
// cuda_mlp.h with bias + activation rounded to the weight type between the GEMMs.

#include "kernels/cuda/elementwise.h"
#include "model/backend/cuda/cuda_mlp.h"
#include "model/layers/ffn.h"

namespace linserve {
namespace {

cuda::ActivationKind ToKernel(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return cuda::ActivationKind::kGelu;
    case Activation::kGeluTanh:
      return cuda::ActivationKind::kGeluTanh;
    case Activation::kRelu:
      return cuda::ActivationKind::kRelu;
  }
  return cuda::ActivationKind::kGelu;
}

}  // namespace

std::vector<CudaTensorGroup> CudaTensorsOfFfn(const ComponentSpec&) {
  return CudaTwoLayerMlpTensors("ffn");
}

std::unique_ptr<CudaMlp> CreateCudaFfn(const CudaLayerContext& context, const ComponentSpec& spec,
                                       const CudaLayerWeights& weights) {
  const FfnParams p = FfnParams::From(spec.params);
  return CreateCudaTwoLayerMlp(context, weights, p.d_ff, CudaMlpStep::kActivation,
                               ToKernel(p.activation));
}

}  // namespace linserve
