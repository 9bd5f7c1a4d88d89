#include "model/layers/gated_linear_attention.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const GatedLinearAttentionParams p = GatedLinearAttentionParams::From(values);
  const int64_t kd = p.KeyDim();
  const int64_t vd = p.ValueDim();
  const int64_t rank = p.gate_low_rank_dim;
  std::vector<TensorDecl> t = {
      {"attn.q_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.k_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.v_proj.weight", {vd, d}, /*projection=*/true},
      {"attn.gk_proj.0.weight", {rank, d}, /*projection=*/true},
  };
  if (p.use_output_gate) t.push_back({"attn.g_proj.weight", {vd, d}, /*projection=*/true});
  t.push_back({"attn.gk_proj.1.weight", {kd, rank}});
  t.push_back({"attn.gk_proj.1.bias", {kd}});
  if (p.use_short_conv) {
    const std::pair<const char*, int64_t> convs[] = {{"q", kd}, {"k", kd}, {"v", vd}};
    for (const auto& [conv, channels] : convs) {
      t.push_back({absl::StrCat("attn.", conv, "_conv1d.weight"), {channels, p.conv_size}});
      if (p.conv_bias) t.push_back({absl::StrCat("attn.", conv, "_conv1d.bias"), {channels}});
    }
  }
  t.push_back({"attn.g_norm.weight", {int64_t{p.head_v_dim}}});
  t.push_back({"attn.o_proj.weight", {d, vd}, /*projection=*/true});
  return t;
}

int64_t StateFloats(const ParamValues& values) {
  return GatedLinearAttentionParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const GatedLinearAttentionParams p = GatedLinearAttentionParams::From(values);
  if (index < p.HistoryOffset()) {
    const int64_t per_head = int64_t{p.head_k_dim} * p.head_v_dim;
    const int64_t in_head = index % per_head;
    return absl::StrCat("head ", index / per_head, ", S[", in_head / p.head_v_dim, "][",
                        in_head % p.head_v_dim, "]");
  }
  const int64_t in_history = index - p.HistoryOffset();
  const int64_t row = in_history / p.ConvChannels();
  int64_t channel = in_history % p.ConvChannels();
  const char* which = "q";
  if (channel >= 2 * p.KeyDim()) {
    which = "v";
    channel -= 2 * p.KeyDim();
  } else if (channel >= p.KeyDim()) {
    which = "k";
    channel -= p.KeyDim();
  }
  return absl::StrCat(which, " of token t-", p.conv_size - 2 - row, " (history row ", row,
                      "), channel ", channel);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  for (size_t i = 0; i < slice.size(); ++i) {
    if (std::optional<std::string> bad = CheckStateValue(slice[i], max_magnitude)) {
      return StateProblem{static_cast<int64_t>(i), *std::move(bad)};
    }
  }
  return std::nullopt;
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
  k.state_layout =
      "per head S (head_k_dim × head_v_dim, row-major); then, with use_short_conv, the last "
      "conv_size − 1 inputs of q | k | v before their convolutions, oldest first: (conv_size − "
      "1) × (2 · key_dim + value_dim)";
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

const MixerKind& GatedLinearAttentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
