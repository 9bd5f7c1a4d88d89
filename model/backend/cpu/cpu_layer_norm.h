// The layer_norm norm (model/layers/layer_norm.h) on the CPU.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_NORM_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_NORM_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"
#include "model/layers/layer_weights.h"

namespace linserve {

// `scale` and `shift`: the norm instance's weight and bias.
std::unique_ptr<CpuNorm> CreateCpuLayerNorm(const CpuLayerContext& context,
                                            const ComponentSpec& spec, const Tensor& scale,
                                            const Tensor& shift);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_LAYER_NORM_H_
