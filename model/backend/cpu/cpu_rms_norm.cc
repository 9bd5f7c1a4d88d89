// The rms_norm norm (model/layers/rms_norm.h) on the CPU.

#include "model/backend/cpu/cpu_layer.h"

#include "kernels/cpu/elementwise.h"
#include "model/layers/rms_norm.h"

namespace linserve {
namespace {

class CpuRmsNorm final : public CpuNorm {
 public:
  CpuRmsNorm(int64_t d_model, float eps, const Tensor& scale)
      : d_model_(d_model), eps_(eps), scale_(scale) {}

  void Apply(const float* in, int rows, float* out) const override {
    cpu::RmsNorm(in, rows, d_model_, scale_.data.data(), eps_, out);
  }

 private:
  const int64_t d_model_;
  const float eps_;
  const Tensor& scale_;
};

}  // namespace

std::unique_ptr<CpuNorm> CreateCpuRmsNorm(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const Tensor& scale, const Tensor& /*shift: none*/) {
  return std::make_unique<CpuRmsNorm>(context.model.config.d_model,
                                      static_cast<float>(RmsNormParams::From(spec.params).eps),
                                      scale);
}

}  // namespace linserve
