// The ffn MLP (model/layers/ffn.h) on the CPU: the two-layer MLP (cpu_mlp.h) with the activation
// fused into fc1.

#include "kernels/cpu/elementwise.h"
#include "model/backend/cpu/cpu_mlp.h"
#include "model/layers/ffn.h"

namespace linserve {
namespace {

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

}  // namespace

std::unique_ptr<CpuMlp> CreateCpuFfn(const CpuLayerContext& context, const ComponentSpec& spec,
                                     const LayerWeights& weights) {
  return CreateCpuTwoLayerMlp(context, weights, "ffn", CpuMlpStep::kActivation,
                              ToKernel(FfnParams::From(spec.params).activation));
}

}  // namespace linserve
