// The sliding_window_attention mixer (model/layers/sliding_window_attention.h) on the CPU: the
// q/k/v GEMMs over all rows of a pass, then per session and head, token by token, softmax
// attention over the ring of past keys and values (each key rotated by its distance) and the
// current token, the ring written after; the output projection added to the residual.
#ifndef LINSERVE_MODEL_BACKEND_CPU_CPU_SLIDING_WINDOW_ATTENTION_H_
#define LINSERVE_MODEL_BACKEND_CPU_CPU_SLIDING_WINDOW_ATTENTION_H_

#include <memory>

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/layer_spec.h"

namespace linserve {

std::unique_ptr<CpuMixer> CreateCpuSlidingWindowAttention(const CpuLayerContext& context,
                                                          const ComponentSpec& spec,
                                                          const LayerWeights& weights,
                                                          int64_t state_offset);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_CPU_CPU_SLIDING_WINDOW_ATTENTION_H_
