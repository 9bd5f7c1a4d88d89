// The gated_mlp MLP (model/layers/gated_mlp.h) on the CPU: fc1 over all rows (value and gate in
// one GEMM), value ⊙ act(gate), then fc2 added to the residual.

#include "model/backend/cpu/cpu_layer.h"

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/packed_linear.h"
#include "model/layers/gated_mlp.h"

namespace linserve {
namespace {

// Workspace buffers (CpuWorkspace indices): fc1's output (value and gate) and the hidden rows.
enum Buffer { kFc1, kHidden };

cpu::Activation ToKernel(GateActivation a) {
  switch (a) {
    case GateActivation::kSilu:
      return cpu::Activation::kSilu;
    case GateActivation::kGelu:
      return cpu::Activation::kGelu;
    case GateActivation::kSigmoid:
      return cpu::Activation::kSigmoid;
  }
  return cpu::Activation::kSilu;
}

class CpuGatedMlp final : public CpuMlp {
 public:
  CpuGatedMlp(const CpuLayerContext& context, const GatedMlpParams& p, const LayerWeights& w)
      : w_(w),
        workspace_(context.workspace),
        threads_(context.threads),
        d_model_(context.model.config.d_model),
        d_ff_(p.d_ff),
        activation_(ToKernel(p.activation)),
        fc1_(PackWeights(context, w.At("mlp.fc1.weight"))),
        fc2_(PackWeights(context, w.At("mlp.fc2.weight"))) {
    workspace_.Reserve(kFc1, int64_t{context.max_rows} * 2 * d_ff_);
    workspace_.Reserve(kHidden, int64_t{context.max_rows} * d_ff_);
  }

  void Forward(const float* in, int rows, float* residual) override {
    float* a = workspace_.buffer(kFc1);
    float* hidden = workspace_.buffer(kHidden);
    cpu::Linear(in, rows, d_model_, fc1_, OptionalData(w_, "mlp.fc1.bias"), cpu::Activation::kNone,
                cpu::LinearOutput::kStore, a, 2 * d_ff_, threads_);
    cpu::GatedProduct(activation_, a, rows, d_ff_, hidden);
    cpu::Linear(hidden, rows, d_ff_, fc2_, OptionalData(w_, "mlp.fc2.bias"), cpu::Activation::kNone,
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

std::unique_ptr<CpuMlp> CreateCpuGatedMlp(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const LayerWeights& weights) {
  return std::make_unique<CpuGatedMlp>(context, GatedMlpParams::From(spec.params), weights);
}

}  // namespace linserve
