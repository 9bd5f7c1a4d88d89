#include "model/layers/short_conv.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const ShortConvParams p = ShortConvParams::From(values);
  const int64_t di = p.d_inner;
  std::vector<TensorDecl> t = {{"conv.in_proj.weight", {2 * di, d}, /*projection=*/true}};
  if (p.bias) t.push_back({"conv.in_proj.bias", {2 * di}});
  t.push_back({"conv.weight", {di, int64_t{p.kernel_size}}});
  if (p.conv_bias) t.push_back({"conv.bias", {di}});
  t.push_back({"conv.out_proj.weight", {d, di}, /*projection=*/true});
  if (p.bias) t.push_back({"conv.out_proj.bias", {d}});
  return t;
}

int64_t StateFloats(const ParamValues& values) {
  return ShortConvParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const ShortConvParams p = ShortConvParams::From(values);
  const int64_t row = index / p.d_inner;
  return absl::StrCat("u of token t-", p.kernel_size - 2 - row, " (row ", row, "), channel ",
                      index % p.d_inner);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "short_conv";
  k.doc = "a gated short convolution: u, g = in_proj(x); out_proj(silu(causal depthwise conv(u)) ⊙ g)";
  // IntParam declares a required int; kernel_size has a default.
  ParamSpec kernel_size =
      IntParam("kernel_size", 2, 64, "taps of the causal convolution, the current token's included");
  kernel_size.default_value = int64_t{3};  // Default: 3 (Based's BaseConv)
  k.params = {
      IntParam("d_inner", 1, 1 << 20, "channels of the convolution (in_proj is twice as wide)"),
      std::move(kernel_size),
      BoolParam("bias", true, "biases on in_proj and out_proj"),
      BoolParam("conv_bias", false, "a bias on the convolution"),
  };
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout =
      "the last kernel_size − 1 values of u, oldest first: (kernel_size − 1) × d_inner, "
      "row-major";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  k.bf16_state = true;
  return k;
}

}  // namespace

ShortConvParams ShortConvParams::From(const ParamValues& v) {
  return {.d_inner = static_cast<int32_t>(v.Int("d_inner")),
          .kernel_size = static_cast<int32_t>(v.Int("kernel_size")),
          .bias = v.Bool("bias"),
          .conv_bias = v.Bool("conv_bias")};
}

ParamValues ShortConvParams::ToValues() const {
  ParamValues v;
  v.Set("d_inner", int64_t{d_inner});
  v.Set("kernel_size", int64_t{kernel_size});
  v.Set("bias", bias);
  v.Set("conv_bias", conv_bias);
  return v;
}

int64_t ShortConvParams::StateFloats() const {
  return (int64_t{kernel_size} - 1) * d_inner;
}

const MixerKind& ShortConvKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
