#include "model/layers/ffn.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

namespace linserve {
namespace {

constexpr std::array<std::pair<Activation, std::string_view>, 3> kActivationNames = {{
    {Activation::kGelu, "gelu"},
    {Activation::kGeluTanh, "gelu_tanh"},
    {Activation::kRelu, "relu"},
}};

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const FfnParams p = FfnParams::From(values);
  const int64_t ff = p.d_ff;
  std::vector<TensorDecl> t = {{"ffn.fc1.weight", {ff, d}, /*projection=*/true}};
  if (p.bias) t.push_back({"ffn.fc1.bias", {ff}});
  t.push_back({"ffn.fc2.weight", {d, ff}, /*projection=*/true});
  if (p.bias) t.push_back({"ffn.fc2.bias", {d}});
  return t;
}

MlpKind MakeKind() {
  MlpKind k;
  k.name = "ffn";
  k.doc = "two projections with an activation between: act(x W1 + b1) W2 + b2";
  std::vector<std::string> activations;
  for (const auto& [value, text] : kActivationNames) activations.emplace_back(text);
  k.params = {
      IntParam("d_ff", 1, 1 << 20, "hidden width"),
      ChoiceParam("activation", activations, "gelu", "act: gelu (erf), gelu_tanh or relu"),
      BoolParam("bias", true, "biases on fc1 and fc2"),
  };
  k.tensors = Tensors;
  return k;
}

}  // namespace

std::optional<Activation> ActivationFromString(std::string_view name) {
  for (const auto& [value, text] : kActivationNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::string_view ToString(Activation v) {
  for (const auto& [value, text] : kActivationNames) {
    if (value == v) return text;
  }
  return "unknown";
}

FfnParams FfnParams::From(const ParamValues& v) {
  return {.d_ff = static_cast<int32_t>(v.Int("d_ff")),
          .activation = *ActivationFromString(v.Choice("activation")),
          .bias = v.Bool("bias")};
}

ParamValues FfnParams::ToValues() const {
  ParamValues v;
  v.Set("d_ff", int64_t{d_ff});
  v.Set("activation", std::string(ToString(activation)));
  v.Set("bias", bias);
  return v;
}

const MlpKind& FfnKind() {
  static const MlpKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
