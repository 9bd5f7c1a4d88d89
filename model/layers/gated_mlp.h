// The "gated_mlp" MLP (Based's GatedMlp): a = x W1 + b1 with W1 d_model → 2·d_ff; the first half
// of a is the value, the second the gate: y = (a[:d_ff] ⊙ act(a[d_ff:])) W2 + b2.
#ifndef LINSERVE_MODEL_LAYERS_GATED_MLP_H_
#define LINSERVE_MODEL_LAYERS_GATED_MLP_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

// "silu" | "gelu" (erf) | "sigmoid"
enum class GateActivation { kSilu, kGelu, kSigmoid };
std::string_view ToString(GateActivation v);
// The value named `name`, or none.
std::optional<GateActivation> GateActivationFromString(std::string_view name);

struct GatedMlpParams {
  int32_t d_ff = 0;
  GateActivation activation = GateActivation::kSilu;
  bool bias = false;  // biases on fc1 and fc2

  static GatedMlpParams From(const ParamValues& values);
  ParamValues ToValues() const;
};

const MlpKind& GatedMlpKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_GATED_MLP_H_
