#include "model/layers/gated_delta_net.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

absl::Status Check(const ParamValues& values, ParamErrorFn error) {
  const GatedDeltaNetParams p = GatedDeltaNetParams::From(values);
  if (p.n_v_heads % p.n_heads != 0) {
    return error("n_v_heads", absl::StrCat("must be a multiple of n_heads (", p.n_heads, "), got ",
                                           p.n_v_heads));
  }
  return absl::OkStatus();
}

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const GatedDeltaNetParams p = GatedDeltaNetParams::From(values);
  const int64_t kd = p.KeyDim();
  const int64_t vd = p.ValueDim();
  const int64_t hv = p.n_v_heads;
  const int64_t taps = p.conv_size;
  std::vector<TensorDecl> t = {
      {"attn.q_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.k_proj.weight", {kd, d}, /*projection=*/true},
      {"attn.v_proj.weight", {vd, d}, /*projection=*/true},
      {"attn.a_proj.weight", {hv, d}, /*projection=*/true},
      {"attn.b_proj.weight", {hv, d}, /*projection=*/true},
  };
  if (p.use_gate) t.push_back({"attn.g_proj.weight", {vd, d}, /*projection=*/true});
  t.push_back({"attn.A_log", {hv}});
  t.push_back({"attn.dt_bias", {hv}});
  const std::pair<const char*, int64_t> convs[] = {{"q", kd}, {"k", kd}, {"v", vd}};
  for (const auto& [conv, channels] : convs) {
    t.push_back({absl::StrCat("attn.", conv, "_conv1d.weight"), {channels, taps}});
    if (p.conv_bias) t.push_back({absl::StrCat("attn.", conv, "_conv1d.bias"), {channels}});
  }
  t.push_back({"attn.o_norm.weight", {int64_t{p.head_v_dim}}});
  t.push_back({"attn.o_proj.weight", {d, vd}, /*projection=*/true});
  return t;
}

int64_t StateFloats(const ParamValues& values) {
  return GatedDeltaNetParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const GatedDeltaNetParams p = GatedDeltaNetParams::From(values);
  if (index < p.HistoryOffset()) {
    const int64_t per_head = int64_t{p.head_k_dim} * p.head_v_dim;
    const int64_t in_head = index % per_head;
    return absl::StrCat("value head ", index / per_head, ", S[", in_head / p.head_v_dim, "][",
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
  k.name = "gated_delta_net";
  k.doc =
      "Gated DeltaNet (fla's GatedDeltaNet): the delta rule with a per-head decay, "
      "L2-normalised q/k after short convolutions, a gated RMSNorm on the output";
  ParamSpec conv_size = IntParam("conv_size", 2, 64,
                                 "taps of the short convolutions on q, k and v, the current "
                                 "token's included");
  conv_size.default_value = int64_t{4};  // Default: 4 (fla's conv_size)
  k.params = {
      IntParam("n_heads", 1, 1024, "q/k heads"),
      IntParam("n_v_heads", 1, 1024,
               "value heads (each n_v_heads / n_heads of them share a q/k head); a multiple of "
               "n_heads",
               /*default_from=*/"n_heads"),
      IntParam("head_k_dim", 1, 1024, "width of each q and k head"),
      IntParam("head_v_dim", 1, 1024, "width of each value head"),
      std::move(conv_size),
      BoolParam("conv_bias", false, "biases on the short convolutions"),
      BoolParam("use_gate", true, "the output gate: o_norm(o) ⊙ silu(g_proj(x))"),
      BoolParam("allow_neg_eigval", false, "β = 2 · sigmoid(b_proj(x)) instead of sigmoid"),
      EpsilonParam("norm_eps", 1e-5, "eps of the output's per-head RMSNorm"),
  };
  k.check = Check;
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout =
      "per value head S (head_k_dim × head_v_dim, row-major); then the last conv_size − 1 "
      "inputs of q | k | v before their convolutions, oldest first: (conv_size − 1) × "
      "(2 · n_heads · head_k_dim + n_v_heads · head_v_dim)";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  return k;
}

}  // namespace

GatedDeltaNetParams GatedDeltaNetParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .n_v_heads = static_cast<int32_t>(v.Int("n_v_heads")),
          .head_k_dim = static_cast<int32_t>(v.Int("head_k_dim")),
          .head_v_dim = static_cast<int32_t>(v.Int("head_v_dim")),
          .conv_size = static_cast<int32_t>(v.Int("conv_size")),
          .conv_bias = v.Bool("conv_bias"),
          .use_gate = v.Bool("use_gate"),
          .allow_neg_eigval = v.Bool("allow_neg_eigval"),
          .norm_eps = v.Number("norm_eps")};
}

ParamValues GatedDeltaNetParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("n_v_heads", int64_t{n_v_heads});
  v.Set("head_k_dim", int64_t{head_k_dim});
  v.Set("head_v_dim", int64_t{head_v_dim});
  v.Set("conv_size", int64_t{conv_size});
  v.Set("conv_bias", conv_bias);
  v.Set("use_gate", use_gate);
  v.Set("allow_neg_eigval", allow_neg_eigval);
  v.Set("norm_eps", norm_eps);
  return v;
}

int64_t GatedDeltaNetParams::StateFloats() const {
  return HistoryOffset() + (int64_t{conv_size} - 1) * ConvChannels();
}

const MixerKind& GatedDeltaNetKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
