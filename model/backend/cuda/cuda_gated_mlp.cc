// The CUDA implementation of the "gated_mlp" MLP (model/layers/gated_mlp.h): fc1 GEMM (value and
// gate, 2·d_ff wide), bias + value ⊙ act(gate) rounded to the weight type, fc2 GEMM.

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"
#include "model/layers/gated_mlp.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMlp indices): fc1's output (value and gate) and the hidden rows.
enum Buffer { kFc1, kHiddenT };

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

class CudaGatedMlp final : public CudaMlp {
 public:
  CudaGatedMlp(const CudaLayerContext& context, const GatedMlpParams& p, const CudaLayerWeights& w)
      : w_(w),
        gemm_(context.gemm),
        dtype_(context.dtype),
        d_model_(context.model.config.d_model),
        d_ff_(p.d_ff),
        activation_(ToKernel(p.activation)) {
    const size_t rows = static_cast<size_t>(context.max_rows);
    context.scratch.Reserve(ScratchRole::kMlp, kFc1, rows * 2 * d_ff_ * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMlp, kHiddenT, rows * d_ff_ * cuda::DTypeSize(dtype_));
  }

  absl::Status Forward(cudaStream_t s, const CudaWorkspace& ws, int rows) override {
    float* a = static_cast<float*>(Scratch(ws, ScratchRole::kMlp, kFc1));
    void* hidden_t = Scratch(ws, ScratchRole::kMlp, kHiddenT);
    LINSERVE_RETURN_IF_ERROR(
        gemm_.Linear(s, dtype_, ws.act.xt, w_.fc1_weight, a, rows, 2 * d_ff_, d_model_));
    LINSERVE_RETURN_IF_ERROR(
        cuda::LaunchBiasGate(s, a, w_.fc1_bias, rows, d_ff_, activation_, dtype_, hidden_t));
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

std::unique_ptr<CudaMlp> CreateCudaGatedMlp(const CudaLayerContext& context,
                                            const ComponentSpec& spec,
                                            const CudaLayerWeights& weights) {
  return std::make_unique<CudaGatedMlp>(context, GatedMlpParams::From(spec.params), weights);
}

}  // namespace linserve
