// The rms_norm norm (model/layers/rms_norm.h) on the CPU.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_RMS_NORM_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_RMS_NORM_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"
#include "model/layers/layer_weights.h"

namespace linserve {

// `scale`: the norm instance's weight.
std::unique_ptr<CpuNorm> CreateCpuRmsNorm(const CpuLayerContext& context, const ComponentSpec& spec,
                                          const Tensor& scale);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_RMS_NORM_H_
