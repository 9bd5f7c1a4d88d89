// The "ffn" MLP: act(x W1 + b1) W2 + b2, W1 d_model → d_ff, W2 d_ff → d_model.
#ifndef LINSERVE_MODEL_LAYERS_FFN_H_
#define LINSERVE_MODEL_LAYERS_FFN_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

// "gelu" (erf) | "gelu_tanh" | "relu"
enum class Activation { kGelu, kGeluTanh, kRelu };
std::string_view ToString(Activation v);
// The value named `name`, or none.
std::optional<Activation> ActivationFromString(std::string_view name);

struct FfnParams {
  int32_t d_ff = 0;
  Activation activation = Activation::kGelu;
  bool bias = true;  // biases on fc1 and fc2

  static FfnParams From(const ParamValues& values);
  ParamValues ToValues() const;
};

const MlpKind& FfnKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_FFN_H_
