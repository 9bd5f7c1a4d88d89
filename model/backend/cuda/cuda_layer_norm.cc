// The CUDA implementation of the "layer_norm" norm (model/layers/layer_norm.h), fused with the
// residual add before it (kernels/cuda/elementwise.h's AddNormArgs).

#include "model/backend/cuda/cuda_layer.h"

#include "kernels/cuda/elementwise.h"
#include "model/layers/layer_norm.h"

namespace linserve {
namespace {

class CudaLayerNorm final : public CudaNorm {
 public:
  CudaLayerNorm(const CudaLayerContext& context, const LayerNormParams& p, const float* scale,
                const float* shift)
      : scale_(scale),
        shift_(shift),
        eps_(static_cast<float>(p.eps)),
        d_model_(context.model.config.d_model),
        dtype_(context.dtype) {}

  cuda::AddNormArgs Args(const Activations& act, int rows, bool pre) const override {
    cuda::AddNormArgs a = ResidualNormArgs(act, rows, pre, d_model_, dtype_);
    a.norm = cuda::NormType::kLayerNorm;
    a.gamma = scale_;
    a.beta = shift_;
    a.eps = eps_;
    return a;
  }

 private:
  const float* scale_;
  const float* shift_;
  const float eps_;
  const int d_model_;
  const cuda::DType dtype_;
};

}  // namespace

std::unique_ptr<CudaNorm> CreateCudaLayerNorm(const CudaLayerContext& context,
                                              const ComponentSpec& spec, const float* scale,
                                              const float* shift) {
  return std::make_unique<CudaLayerNorm>(context, LayerNormParams::From(spec.params), scale, shift);
}

}  // namespace linserve
