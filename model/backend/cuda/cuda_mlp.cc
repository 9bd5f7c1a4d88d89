#include "model/backend/cuda/cuda_mlp.h"

#include "kernels/cuda/cuda_status.h"

namespace linserve {
namespace {

// Scratch buffers (ScratchRole::kMlp indices): fc1's output (fp32; unused where the product and
// its activation are one launch, Gemm::LinearActivation) and the hidden rows (T).
enum Buffer { kFc1, kHiddenT };

class CudaTwoLayerMlp final : public CudaMlp {
 public:
  CudaTwoLayerMlp(const CudaLayerContext& context, const CudaLayerWeights& w, int64_t d_ff,
                  CudaMlpStep step, cuda::ActivationKind activation)
      : fc1_(w.Matrix("fc1")),
        fc1_bias_(w.Vector("fc1_bias")),
        fc2_(w.Matrix("fc2")),
        fc2_bias_(w.Vector("fc2_bias")),
        gemm_(context.gemm),
        dtype_(context.dtype),
        d_model_(context.model.config.d_model),
        d_ff_(d_ff),
        step_(step),
        activation_(activation) {
    const size_t rows = static_cast<size_t>(context.max_rows);
    const size_t fc1_columns = static_cast<size_t>(step == CudaMlpStep::kGate ? 2 * d_ff : d_ff);
    context.scratch.Reserve(ScratchRole::kMlp, kFc1, rows * fc1_columns * sizeof(float));
    context.scratch.Reserve(ScratchRole::kMlp, kHiddenT, rows * d_ff_ * cuda::DTypeSize(dtype_));
  }

  absl::Status Forward(cudaStream_t s, const CudaWorkspace& ws, int rows,
                       const cuda::AddNormArgs& then) override {
    float* a = static_cast<float*>(Scratch(ws, ScratchRole::kMlp, kFc1));
    void* hidden_t = Scratch(ws, ScratchRole::kMlp, kHiddenT);
    const cuda::ActivationEpilogue epilogue{step_ == CudaMlpStep::kGate, activation_, fc1_bias_};
    LINSERVE_RETURN_IF_ERROR(gemm_.LinearActivation(s, dtype_, ws.act.xt, fc1_, rows, d_ff_,
                                                    d_model_, epilogue, a, hidden_t));
    cuda::AddNormArgs add_norm = then;
    add_norm.delta_bias = fc2_bias_;
    return gemm_.LinearAddNorm(s, dtype_, hidden_t, fc2_, ws.act.proj, rows, d_model_, d_ff_,
                               add_norm);
  }

 private:
  const void* const fc1_;        // T
  const float* const fc1_bias_;  // null: none
  const void* const fc2_;
  const float* const fc2_bias_;
  cuda::Gemm& gemm_;
  const cuda::DType dtype_;
  const int64_t d_model_;
  const int64_t d_ff_;
  const CudaMlpStep step_;
  const cuda::ActivationKind activation_;
};

}  // namespace

std::vector<CudaTensorGroup> CudaTwoLayerMlpTensors(const std::string& prefix) {
  return {{"fc1", {prefix + ".fc1.weight"}, /*matrix=*/true},
          {"fc1_bias", {prefix + ".fc1.bias"}},
          {"fc2", {prefix + ".fc2.weight"}, /*matrix=*/true},
          {"fc2_bias", {prefix + ".fc2.bias"}}};
}

std::unique_ptr<CudaMlp> CreateCudaTwoLayerMlp(const CudaLayerContext& context,
                                               const CudaLayerWeights& weights, int64_t d_ff,
                                               CudaMlpStep step, cuda::ActivationKind activation) {
  return std::make_unique<CudaTwoLayerMlp>(context, weights, d_ff, step, activation);
}

}  // namespace linserve
