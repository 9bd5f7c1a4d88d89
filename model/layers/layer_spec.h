// LayerSpec: what config.json says about one layer — its mixer, its norm and its MLP, each a
// kind (model/layers/component_kind.h) with that kind's parameter values.
#ifndef LINSERVE_MODEL_LAYERS_LAYER_SPEC_H_
#define LINSERVE_MODEL_LAYERS_LAYER_SPEC_H_

#include <string>

#include "model/layers/param.h"

namespace linserve {

struct ComponentSpec {
  std::string kind;  // a registered kind of its role, e.g. "linear_attention"
  ParamValues params;
  friend bool operator==(const ComponentSpec&, const ComponentSpec&) = default;
};

// Per layer, with x the residual stream (docs/architecture.md §4):
//   pre-norm:  h = x + mixer(norm1(x));  y = h + mlp(norm2(h))
//   post-norm: h = norm1(x + mixer(x));  y = norm2(h + mlp(h))
// norm1 and norm2 are two instances of `norm` (tensors ln1.* and ln2.*). With the MLP kind "none"
// the layer has neither the MLP nor norm2: y = h (model/layers/none.h).
struct LayerSpec {
  ComponentSpec mixer;
  ComponentSpec norm;
  ComponentSpec mlp;
  friend bool operator==(const LayerSpec&, const LayerSpec&) = default;
};

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_LAYER_SPEC_H_
