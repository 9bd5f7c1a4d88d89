#include "model/backend/cpu/cpu_projected_mixer.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_linear.h"

namespace linserve {

CpuProjectedMixer::Projection CpuProjectedMixer::Make(const CpuLayerContext& context,
                                                      const LayerWeights& weights,
                                                      const std::string& prefix) const {
  const Tensor& w = weights.At(prefix + ".weight");
  return {PackWeights(context, w), OptionalData(weights, prefix + ".bias"), w.shape[0]};
}

CpuProjectedMixer::CpuProjectedMixer(const CpuLayerContext& context, const LayerWeights& weights,
                                     int64_t state_offset, const std::vector<std::string>& inputs,
                                     const std::string& output)
    : workspace_(context.workspace),
      threads_(context.threads),
      state_offset_(state_offset),
      d_model_(context.model.config.d_model),
      output_(Make(context, weights, output)) {
  core_width_ = weights.At(output + ".weight").shape[1];
  for (const std::string& prefix : inputs) inputs_.push_back(Make(context, weights, prefix));
  for (size_t i = 0; i < inputs_.size(); ++i) {
    workspace_.Reserve(static_cast<int>(i), int64_t{context.max_rows} * inputs_[i].width);
  }
  workspace_.Reserve(static_cast<int>(inputs_.size()), int64_t{context.max_rows} * core_width_);
  buffers_.resize(inputs_.size());
}

void CpuProjectedMixer::Forward(const float* in, const CpuPass& pass, float* residual) {
  const cpu::Activation none = cpu::Activation::kNone;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Projection& p = inputs_[i];
    buffers_[i] = workspace_.buffer(static_cast<int>(i));
    cpu::Linear(in, pass.rows, d_model_, p.weight, p.bias, none, cpu::LinearOutput::kStore,
                buffers_[i], p.width, threads_);
  }
  float* out = workspace_.buffer(static_cast<int>(inputs_.size()));
  Core(pass, buffers_, out);
  cpu::Linear(out, pass.rows, core_width_, output_.weight, output_.bias, none,
              cpu::LinearOutput::kAccumulate, residual, d_model_, threads_);
}

}  // namespace linserve
