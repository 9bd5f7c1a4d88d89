#include "model/backend/cpu/cpu_mlp.h"

#include "kernels/cpu/packed_linear.h"

namespace linserve {
namespace {

// Workspace buffers (CpuWorkspace indices): the hidden rows and, for a gate, fc1's output.
enum Buffer { kHidden, kFc1 };

class CpuTwoLayerMlp final : public CpuMlp {
 public:
  CpuTwoLayerMlp(const CpuLayerContext& context, const LayerWeights& w, const std::string& prefix,
                 CpuMlpStep step, cpu::Activation activation)
      : workspace_(context.workspace),
        threads_(context.threads),
        d_model_(context.model.config.d_model),
        d_ff_(w.At(prefix + ".fc2.weight").shape[1]),
        step_(step),
        activation_(activation),
        fc1_(PackWeights(context, w.At(prefix + ".fc1.weight"))),
        fc1_bias_(OptionalData(w, prefix + ".fc1.bias")),
        fc2_(PackWeights(context, w.At(prefix + ".fc2.weight"))),
        fc2_bias_(OptionalData(w, prefix + ".fc2.bias")) {
    workspace_.Reserve(kHidden, int64_t{context.max_rows} * d_ff_);
    if (step_ == CpuMlpStep::kGate) workspace_.Reserve(kFc1, int64_t{context.max_rows} * 2 * d_ff_);
  }

  void Forward(const float* in, int rows, float* residual) override {
    float* hidden = workspace_.buffer(kHidden);
    if (step_ == CpuMlpStep::kActivation) {
      cpu::Linear(in, rows, d_model_, fc1_, fc1_bias_, activation_, cpu::LinearOutput::kStore,
                  hidden, d_ff_, threads_);
    } else {
      float* a = workspace_.buffer(kFc1);
      cpu::Linear(in, rows, d_model_, fc1_, fc1_bias_, cpu::Activation::kNone,
                  cpu::LinearOutput::kStore, a, 2 * d_ff_, threads_);
      cpu::GatedProduct(activation_, a, rows, d_ff_, hidden);
    }
    cpu::Linear(hidden, rows, d_ff_, fc2_, fc2_bias_, cpu::Activation::kNone,
                cpu::LinearOutput::kAccumulate, residual, d_model_, threads_);
  }

 private:
  CpuWorkspace& workspace_;
  const int threads_;
  const int64_t d_model_;
  const int64_t d_ff_;
  const CpuMlpStep step_;
  const cpu::Activation activation_;
  const cpu::PackedMatrix fc1_;
  const float* const fc1_bias_;  // null: none
  const cpu::PackedMatrix fc2_;
  const float* const fc2_bias_;
};

}  // namespace

std::unique_ptr<CpuMlp> CreateCpuTwoLayerMlp(const CpuLayerContext& context,
                                             const LayerWeights& weights, const std::string& prefix,
                                             CpuMlpStep step, cpu::Activation activation) {
  return std::make_unique<CpuTwoLayerMlp>(context, weights, prefix, step, activation);
}

}  // namespace linserve
