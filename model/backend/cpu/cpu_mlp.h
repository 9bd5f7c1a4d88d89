// The MLP of every MLP kind on the CPU, written once: fc1 over all rows of a pass, a step, then
// fc2 added to the residual. The step is an activation, fused into fc1's epilogue (ffn), or a
// gate: fc1 gives value and gate side by side (2·d_ff wide) and the step is value ⊙ act(gate)
// (gated_mlp). A kind's file names its tensors' prefix and its step.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_MLP_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_MLP_H_

#include <memory>
#include <string>

#include "kernels/cpu/elementwise.h"
#include "model/backend/cpu/cpu_layer.h"

namespace linserve {

enum class CpuMlpStep { kActivation, kGate };

// Over the layer's `<prefix>.fc1.weight` / `.fc2.weight` (and their biases when it holds them).
std::unique_ptr<CpuMlp> CreateCpuTwoLayerMlp(const CpuLayerContext& context,
                                             const LayerWeights& weights, const std::string& prefix,
                                             CpuMlpStep step, cpu::Activation activation);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_MLP_H_
