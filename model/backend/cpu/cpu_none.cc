// The "none" MLP (model/layers/none.h) on the CPU: no MLP (the layer holds null and the forward
// pass skips its MLP block).

#include "model/backend/cpu/cpu_layer.h"
#include "model/layers/none.h"

namespace linserve {

std::unique_ptr<CpuMlp> CreateCpuNone(const CpuLayerContext&, const ComponentSpec&,
                                      const LayerWeights&) {
  return nullptr;
}

}  // namespace linserve
