// The gated_mlp MLP (model/layers/gated_mlp.h) on the CPU: fc1 over all rows (value and gate in
// one GEMM), value ⊙ act(gate), then fc2 added to the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_MLP_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_MLP_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"
#include "model/layers/layer_weights.h"

namespace linserve {

std::unique_ptr<CpuMlp> CreateCpuGatedMlp(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const LayerWeights& weights);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_GATED_MLP_H_
