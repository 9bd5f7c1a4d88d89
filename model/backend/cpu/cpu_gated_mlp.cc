// The gated_mlp MLP (model/layers/gated_mlp.h) on the CPU: the two-layer MLP (cpu_mlp.h) with
// fc1 giving value and gate in one GEMM and the step value ⊙ act(gate).

#include "kernels/cpu/elementwise.h"
#include "model/backend/cpu/cpu_mlp.h"
#include "model/layers/gated_mlp.h"

namespace linserve {
namespace {

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

}  // namespace

std::unique_ptr<CpuMlp> CreateCpuGatedMlp(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const LayerWeights& weights) {
  return CreateCpuTwoLayerMlp(context, weights, "mlp", CpuMlpStep::kGate,
                              ToKernel(GatedMlpParams::From(spec.params).activation));
}

}  // namespace linserve
