#include "model/backend/cuda/cuda_layer_norm.h"

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

  absl::Status Apply(cudaStream_t s, const Activations& act, int rows, bool pre, const float* delta,
                     const float* delta_bias) const override {
    cuda::AddLayerNormArgs a;
    a.x = act.x;
    a.delta = delta;
    a.delta_bias = delta_bias;
    a.gamma = scale_;
    a.beta = shift_;
    a.eps = eps_;
    a.y_t = act.xt;
    a.rows = rows;
    a.d = d_model_;
    a.dtype = dtype_;
    if (pre) {
      a.sum_out = act.x;  // x += delta; the normalised copy only feeds the next GEMM
    } else {
      a.y = act.x;  // x = LN(x + delta)
    }
    return cuda::LaunchAddLayerNorm(s, a);
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
