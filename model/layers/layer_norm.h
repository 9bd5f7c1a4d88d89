// The "layer_norm" norm: y = (x − mean(x)) / sqrt(var(x) + eps) · weight + bias, over d_model.
#ifndef LINSERVE_MODEL_LAYERS_LAYER_NORM_H_
#define LINSERVE_MODEL_LAYERS_LAYER_NORM_H_

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

struct LayerNormParams {
  double eps = 1e-5;

  static LayerNormParams From(const ParamValues& values);
  ParamValues ToValues() const;
};

const NormKind& LayerNormKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_LAYER_NORM_H_
