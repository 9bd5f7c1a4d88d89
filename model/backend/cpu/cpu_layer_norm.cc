// The layer_norm norm (model/layers/layer_norm.h) on the CPU.

#include "model/backend/cpu/cpu_layer.h"

#include "kernels/cpu/elementwise.h"
#include "model/layers/layer_norm.h"

namespace linserve {
namespace {

class CpuLayerNorm final : public CpuNorm {
 public:
  CpuLayerNorm(int64_t d_model, float eps, const Tensor& scale, const Tensor& shift)
      : d_model_(d_model), eps_(eps), scale_(scale), shift_(shift) {}

  void Apply(const float* in, int rows, float* out) const override {
    cpu::LayerNorm(in, rows, d_model_, scale_.data.data(), shift_.data.data(), eps_, out);
  }

 private:
  const int64_t d_model_;
  const float eps_;
  const Tensor& scale_;
  const Tensor& shift_;
};

}  // namespace

std::unique_ptr<CpuNorm> CreateCpuLayerNorm(const CpuLayerContext& context,
                                            const ComponentSpec& spec, const Tensor& scale,
                                            const Tensor& shift) {
  return std::make_unique<CpuLayerNorm>(context.model.config.d_model,
                                        static_cast<float>(LayerNormParams::From(spec.params).eps),
                                        scale, shift);
}

}  // namespace linserve
