// The "short_conv" mixer (Based's BaseConv): a gated depthwise causal convolution.
//   a = x Win + bin (2·d_inner wide);  u = a[:d_inner],  g = a[d_inner:]
//   c_t[ch] = Σ_{j<K} w[ch][j] · u_{t-(K-1)+j}[ch] + conv_bias[ch]   (u before position 0 is 0)
//   out = (silu(c_t) ⊙ g) Wout + bout
// Its state slice: the last K−1 values of u, oldest first: (K−1) rows of d_inner floats, row
// K−2 the newest.
#ifndef LINSERVE_MODEL_LAYERS_SHORT_CONV_H_
#define LINSERVE_MODEL_LAYERS_SHORT_CONV_H_

#include <cstdint>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

struct ShortConvParams {
  int32_t d_inner = 0;
  int32_t kernel_size = 3;
  bool bias = true;        // biases on in_proj and out_proj
  bool conv_bias = false;  // a bias on the convolution

  static ShortConvParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // (kernel_size − 1) · d_inner.
  int64_t StateFloats() const;
};

const MixerKind& ShortConvKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_SHORT_CONV_H_
