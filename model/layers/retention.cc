#include "model/layers/retention.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

absl::Status Check(const ParamValues& values, ParamErrorFn error) {
  const RetentionParams p = RetentionParams::From(values);
  if (p.head_k_dim % 2 != 0) {
    return error("head_k_dim",
                 absl::StrCat("must be even (RoPE turns pairs of dims), got ", p.head_k_dim));
  }
  return absl::OkStatus();
}

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  return GatedLinearAttentionTensors(RetentionParams::From(values).Shape(), d);
}

int64_t StateFloats(const ParamValues& values) {
  return RetentionParams::From(values).Shape().StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  return LocateGatedLinearAttentionState(RetentionParams::From(values).Shape(), index);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "retention";
  k.doc =
      "RetNet's multi-scale retention (fla's MultiScaleRetention): linear attention with a fixed "
      "decay 1 − 2^(−5−h) per head h and RoPE on q and k, a gated RMSNorm on the output";
  ParamSpec conv_size = IntParam("conv_size", 2, 64,
                                 "taps of the short convolutions (with use_short_conv), the "
                                 "current token's included");
  conv_size.default_value = int64_t{4};  // Default: 4 (fla's conv_size)
  k.params = {
      IntParam("n_heads", 1, 1024, "heads"),
      IntParam("head_k_dim", 2, 1024, "width of each q and k head; even (RoPE turns its pairs)"),
      IntParam("head_v_dim", 1, 1024, "width of each value head"),
      NumberParam("rope_base", 0, 1e9, /*min_exclusive=*/true, 10000,
                  "RoPE base: dims c and c + head_k_dim/2 turn by position · "
                  "base^(−2c/head_k_dim)"),
      BoolParam("use_short_conv", false, "silu short convolutions on q, k and v"),
      std::move(conv_size),
      BoolParam("conv_bias", false, "biases on the short convolutions"),
      BoolParam("use_output_gate", true, "the output gate: g_norm(o) ⊙ silu(g_proj(x))"),
      EpsilonParam("norm_eps", 1e-5, "eps of the output's per-head RMSNorm"),
  };
  k.check = Check;
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout = kGatedLinearAttentionStateLayout;
  k.locate_state = LocateState;
  k.check_state = CheckState;
  return k;
}

}  // namespace

RetentionParams RetentionParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_k_dim = static_cast<int32_t>(v.Int("head_k_dim")),
          .head_v_dim = static_cast<int32_t>(v.Int("head_v_dim")),
          .rope_base = v.Number("rope_base"),
          .use_short_conv = v.Bool("use_short_conv"),
          .conv_size = static_cast<int32_t>(v.Int("conv_size")),
          .conv_bias = v.Bool("conv_bias"),
          .use_output_gate = v.Bool("use_output_gate"),
          .norm_eps = v.Number("norm_eps")};
}

ParamValues RetentionParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_k_dim", int64_t{head_k_dim});
  v.Set("head_v_dim", int64_t{head_v_dim});
  v.Set("rope_base", rope_base);
  v.Set("use_short_conv", use_short_conv);
  v.Set("conv_size", int64_t{conv_size});
  v.Set("conv_bias", conv_bias);
  v.Set("use_output_gate", use_output_gate);
  v.Set("norm_eps", norm_eps);
  return v;
}

GatedLinearAttentionShape RetentionParams::Shape() const {
  return {.heads = n_heads,
          .k_dim = head_k_dim,
          .v_dim = head_v_dim,
          .gate = GatedLinearAttentionShape::Gate::kRetention,
          .rotary = true,
          .rope_base = rope_base,
          .short_conv = use_short_conv,
          .conv_size = conv_size,
          .conv_bias = conv_bias,
          .output_gate = use_output_gate,
          .norm_eps = norm_eps};
}

const MixerKind& RetentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
