// The short_conv mixer (model/layers/short_conv.h) on the CPU: in_proj over all rows of a pass
// as one GEMM, the convolution token by token per session (prefill and decode run the same
// step, so a chunk leaves bitwise the state its tokens fed one at a time leave), and out_proj
// added to the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_SHORT_CONV_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_SHORT_CONV_H_

#include <cstdint>
#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuShortConv(const CpuLayerContext& context,
                                             const ComponentSpec& spec,
                                             const LayerWeights& weights, int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_SHORT_CONV_H_
