// The CUDA implementation of the "ffn" MLP (model/layers/ffn.h): fc1 GEMM, bias + activation
// rounded to the weight type, fc2 GEMM.

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "model/layers/ffn.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMlp indices).
enum Buffer { kHidden, kHiddenT };

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

class CudaFfn final : public CudaMlp {
 public:
  CudaFfn(const CudaLayerContext& context, const FfnParams& p, const CudaLayerWeights& w)
      : w_(w),
        gemm_(context.gemm),
        dtype_(context.dtype),
        d_model_(context.model.config.d_model),
        d_ff_(p.d_ff),
        activation_(ToKernel(p.activation)) {
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMlp, kHidden, rows * d_ff_ * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMlp, kHiddenT, rows * d_ff_ * cuda::DTypeSize(dtype_));
  }

  absl::Status Forward(cudaStream_t s, const CudaWorkspace& ws, int rows) override {
    float* hidden = static_cast<float*>(Scratch(ws, ScratchRole::kMlp, kHidden));
    void* hidden_t = Scratch(ws, ScratchRole::kMlp, kHiddenT);
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, ws.act.xt, w_.fc1_weight, hidden, rows, d_ff_, d_model_));
    LINSERVE_RETURN_IF_ERROR(cuda::LaunchBiasActivation(s, hidden, w_.fc1_bias, rows, d_ff_,
                                                        activation_, dtype_, hidden_t));
    return gemm_.Linear(s, dtype_, hidden_t, w_.fc2_weight, ws.act.proj, rows, d_model_, d_ff_);
  }

  const float* output_bias() const override { return w_.fc2_bias; }

 private:
  const CudaLayerWeights w_;
  cuda::Gemm& gemm_;
  const cuda::DType dtype_;
  const int64_t d_model_;
  const int64_t d_ff_;
  const cuda::ActivationKind activation_;
};

}  // namespace

std::unique_ptr<CudaMlp> CreateCudaFfn(const CudaLayerContext& context, const ComponentSpec& spec,
                                       const CudaLayerWeights& weights) {
  return std::make_unique<CudaFfn>(context, FfnParams::From(spec.params), weights);
}

}  // namespace linserve
