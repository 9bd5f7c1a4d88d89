// The CUDA implementation of the "rms_norm" norm (model/layers/rms_norm.h), fused with the
// residual add before it (kernels/cuda/elementwise.h's AddNormArgs).

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/elementwise.h"
#include "model/layers/rms_norm.h"

namespace linserve {
namespace {

class CudaRmsNorm final : public CudaNorm {
 public:
  CudaRmsNorm(const CudaLayerContext& context, const RmsNormParams& p, const float* scale)
      : scale_(scale),
        eps_(static_cast<float>(p.eps)),
        d_model_(context.model.config.d_model),
        dtype_(context.dtype) {}

  cuda::AddNormArgs Args(const Activations& act, int rows, bool pre) const override {
    cuda::AddNormArgs a = ResidualNormArgs(act, rows, pre, d_model_, dtype_);
    a.norm = cuda::NormType::kRmsNorm;
    a.gamma = scale_;
    a.eps = eps_;
    return a;
  }

 private:
  const float* scale_;
  const float eps_;
  const int d_model_;
  const cuda::DType dtype_;
};

}  // namespace

std::unique_ptr<CudaNorm> CreateCudaRmsNorm(const CudaLayerContext& context,
                                            const ComponentSpec& spec, const float* scale,
                                            const float* /*shift: none*/) {
  return std::make_unique<CudaRmsNorm>(context, RmsNormParams::From(spec.params), scale);
}

}  // namespace linserve
