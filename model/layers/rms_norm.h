// The "rms_norm" norm: y = x / sqrt(mean(x²) + eps) · weight, over d_model (no shift).
#ifndef LINSERVE_MODEL_LAYERS_RMS_NORM_H_
#define LINSERVE_MODEL_LAYERS_RMS_NORM_H_

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

struct RmsNormParams {
  double eps = 1e-5;

  static RmsNormParams From(const ParamValues& values);
  ParamValues ToValues() const;
};

const NormKind& RmsNormKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_RMS_NORM_H_
