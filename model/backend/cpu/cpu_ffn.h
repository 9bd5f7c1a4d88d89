// The ffn MLP (model/layers/ffn.h) on the CPU: fc1 with the activation fused, then fc2 added to
// the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_FFN_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_FFN_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"
#include "model/layers/layer_weights.h"

namespace linserve {

std::unique_ptr<CpuMlp> CreateCpuFfn(const CpuLayerContext& context, const ComponentSpec& spec,
                                     const LayerWeights& weights);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_FFN_H_
