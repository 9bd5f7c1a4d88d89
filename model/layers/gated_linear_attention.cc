#include "model/layers/gated_linear_attention.h"

#include <string>
#include <utility>
#include <vector>

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  return GatedLinearAttentionTensors(GatedLinearAttentionParams::From(values).Shape(), d);
}

int64_t StateFloats(const ParamValues& values) {
  return GatedLinearAttentionParams::From(values).Shape().StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  return LocateGatedLinearAttentionState(GatedLinearAttentionParams::From(values).Shape(), index);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "gated_linear_attention";
  k.doc =
      "Gated Linear Attention (fla's GatedLinearAttention): linear attention whose state decays "
      "by a low-rank data-dependent gate per key channel, a gated RMSNorm on the output";
  ParamSpec rank =
      IntParam("gate_low_rank_dim", 1, 1024, "rank of the key gate's projection gk_proj");
  rank.default_value = int64_t{16};  // Default: 16 (fla's gate_low_rank_dim)
  ParamSpec conv_size = IntParam("conv_size", 2, 64,
                                 "taps of the short convolutions (with use_short_conv), the "
                                 "current token's included");
  conv_size.default_value = int64_t{4};  // Default: 4 (fla's conv_size)
  k.params = {
      IntParam("n_heads", 1, 1024, "heads"),
      IntParam("head_k_dim", 1, 1024, "width of each q and k head"),
      IntParam("head_v_dim", 1, 1024, "width of each value head"),
      std::move(rank),
      NumberParam("gate_logit_normalizer", 1, 1e6, /*min_exclusive=*/false, 16,
                  "gk = logsigmoid(gk_proj(x)) / gate_logit_normalizer"),
      NumberParam("clamp_min", kGlaMinLogGate, 0, /*min_exclusive=*/false, kGlaMinLogGate,
                  "the floor of gk (fla's clamp_min; the default −1e4 is no clamp in effect: "
                  "e^-1e4 is 0)"),
      BoolParam("use_short_conv", false, "silu short convolutions on q, k and v"),
      std::move(conv_size),
      BoolParam("conv_bias", false, "biases on the short convolutions"),
      BoolParam("use_output_gate", true, "the output gate: g_norm(o) ⊙ silu(g_proj(x))"),
      EpsilonParam("norm_eps", 1e-5, "eps of the output's per-head RMSNorm"),
  };
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout = kGatedLinearAttentionStateLayout;
  k.locate_state = LocateState;
  k.check_state = CheckState;
  return k;
}

}  // namespace

GatedLinearAttentionParams GatedLinearAttentionParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_k_dim = static_cast<int32_t>(v.Int("head_k_dim")),
          .head_v_dim = static_cast<int32_t>(v.Int("head_v_dim")),
          .gate_low_rank_dim = static_cast<int32_t>(v.Int("gate_low_rank_dim")),
          .gate_logit_normalizer = v.Number("gate_logit_normalizer"),
          .clamp_min = v.Number("clamp_min"),
          .use_short_conv = v.Bool("use_short_conv"),
          .conv_size = static_cast<int32_t>(v.Int("conv_size")),
          .conv_bias = v.Bool("conv_bias"),
          .use_output_gate = v.Bool("use_output_gate"),
          .norm_eps = v.Number("norm_eps")};
}

ParamValues GatedLinearAttentionParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_k_dim", int64_t{head_k_dim});
  v.Set("head_v_dim", int64_t{head_v_dim});
  v.Set("gate_low_rank_dim", int64_t{gate_low_rank_dim});
  v.Set("gate_logit_normalizer", gate_logit_normalizer);
  v.Set("clamp_min", clamp_min);
  v.Set("use_short_conv", use_short_conv);
  v.Set("conv_size", int64_t{conv_size});
  v.Set("conv_bias", conv_bias);
  v.Set("use_output_gate", use_output_gate);
  v.Set("norm_eps", norm_eps);
  return v;
}

GatedLinearAttentionShape GatedLinearAttentionParams::Shape() const {
  return {.heads = n_heads,
          .k_dim = head_k_dim,
          .v_dim = head_v_dim,
          .gate = GatedLinearAttentionShape::Gate::kLowRank,
          .rank = gate_low_rank_dim,
          .normalizer = gate_logit_normalizer,
          .clamp_min = clamp_min,
          .short_conv = use_short_conv,
          .conv_size = conv_size,
          .conv_bias = conv_bias,
          .output_gate = use_output_gate,
          .norm_eps = norm_eps};
}

const MixerKind& GatedLinearAttentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
