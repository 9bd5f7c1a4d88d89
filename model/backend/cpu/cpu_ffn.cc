// The ffn MLP (model/layers/ffn.h) on the CPU: fc1 with the activation fused, then fc2 added to
// the residual.

#include "model/backend/cpu/cpu_layer.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_linear.h"
#include "model/layers/ffn.h"

namespace linserve {
namespace {

// Workspace buffer (CpuWorkspace index): the hidden rows.
constexpr int kHidden = 0;

cpu::Activation ToKernel(Activation a) {
  switch (a) {
    case Activation::kGelu:
      return cpu::Activation::kGelu;
    case Activation::kGeluTanh:
      return cpu::Activation::kGeluTanh;
    case Activation::kRelu:
      return cpu::Activation::kRelu;
  }
  return cpu::Activation::kGelu;
}

class CpuFfn final : public CpuMlp {
 public:
  CpuFfn(const CpuLayerContext& context, const FfnParams& p, const LayerWeights& w)
      : w_(w),
        workspace_(context.workspace),
        threads_(context.threads),
        d_model_(context.model.config.d_model),
        d_ff_(p.d_ff),
        activation_(ToKernel(p.activation)),
        fc1_(PackWeights(context, w.At("ffn.fc1.weight"))),
        fc2_(PackWeights(context, w.At("ffn.fc2.weight"))) {
    workspace_.Reserve(kHidden, int64_t{context.max_rows} * d_ff_);
  }

  void Forward(const float* in, int rows, float* residual) override {
    float* hidden = workspace_.buffer(kHidden);
    cpu::Linear(in, rows, d_model_, fc1_, OptionalData(w_, "ffn.fc1.bias"), activation_,
                cpu::LinearOutput::kStore, hidden, d_ff_, threads_);
    cpu::Linear(hidden, rows, d_ff_, fc2_, OptionalData(w_, "ffn.fc2.bias"), cpu::Activation::kNone,
                cpu::LinearOutput::kAccumulate, residual, d_model_, threads_);
  }

 private:
  const LayerWeights& w_;
  CpuWorkspace& workspace_;
  const int threads_;
  const int64_t d_model_;
  const int64_t d_ff_;
  const cpu::Activation activation_;
  const cpu::PackedMatrix fc1_, fc2_;
};

}  // namespace

std::unique_ptr<CpuMlp> CreateCpuFfn(const CpuLayerContext& context, const ComponentSpec& spec,
                                     const LayerWeights& weights) {
  return std::make_unique<CpuFfn>(context, FfnParams::From(spec.params), weights);
}

}  // namespace linserve
