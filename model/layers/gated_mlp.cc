#include "model/layers/gated_mlp.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace linserve {
namespace {

constexpr std::array<std::pair<GateActivation, std::string_view>, 3> kGateActivationNames = {{
    {GateActivation::kSilu, "silu"},
    {GateActivation::kGelu, "gelu"},
    {GateActivation::kSigmoid, "sigmoid"},
}};

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const GatedMlpParams p = GatedMlpParams::From(values);
  const int64_t ff = p.d_ff;
  std::vector<TensorDecl> t = {{"mlp.fc1.weight", {2 * ff, d}, /*projection=*/true}};
  if (p.bias) t.push_back({"mlp.fc1.bias", {2 * ff}});
  t.push_back({"mlp.fc2.weight", {d, ff}, /*projection=*/true});
  if (p.bias) t.push_back({"mlp.fc2.bias", {d}});
  return t;
}

MlpKind MakeKind() {
  MlpKind k;
  k.name = "gated_mlp";
  k.doc = "a gated MLP: a = x W1 + b1 (2·d_ff wide), (a[:d_ff] ⊙ act(a[d_ff:])) W2 + b2";
  std::vector<std::string> activations;
  for (const auto& [value, text] : kGateActivationNames) activations.emplace_back(text);
  k.params = {
      IntParam("d_ff", 1, 1 << 20, "hidden width (fc1 is twice as wide: value, then gate)"),
      ChoiceParam("activation", activations, "silu",
                  "act on the gate: silu, gelu (erf) or sigmoid"),
      BoolParam("bias", false, "biases on fc1 and fc2"),
  };
  k.tensors = Tensors;
  return k;
}

}  // namespace

std::optional<GateActivation> GateActivationFromString(std::string_view name) {
  for (const auto& [value, text] : kGateActivationNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::string_view ToString(GateActivation v) {
  for (const auto& [value, text] : kGateActivationNames) {
    if (value == v) return text;
  }
  return "unknown";
}

GatedMlpParams GatedMlpParams::From(const ParamValues& v) {
  return {.d_ff = static_cast<int32_t>(v.Int("d_ff")),
          .activation = *GateActivationFromString(v.Choice("activation")),
          .bias = v.Bool("bias")};
}

ParamValues GatedMlpParams::ToValues() const {
  ParamValues v;
  v.Set("d_ff", int64_t{d_ff});
  v.Set("activation", std::string(ToString(activation)));
  v.Set("bias", bias);
  return v;
}

const MlpKind& GatedMlpKind() {
  static const MlpKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
