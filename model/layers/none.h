// The "none" MLP: a layer without an MLP, and so without its second norm (Mamba's block, a norm
// and a mixer with a residual):
//   pre-norm:  y = x + mixer(norm1(x))
//   post-norm: y = norm1(x + mixer(x))
// No parameters, no tensors (not even ln2.*).
#ifndef LINSERVE_MODEL_LAYERS_NONE_H_
#define LINSERVE_MODEL_LAYERS_NONE_H_

#include "model/layers/component_kind.h"

namespace linserve {

const MlpKind& NoneKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_NONE_H_
