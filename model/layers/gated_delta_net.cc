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
  return DeltaRuleTensors(GatedDeltaNetParams::From(values).Shape(), d);
}

int64_t StateFloats(const ParamValues& values) {
  return GatedDeltaNetParams::From(values).Shape().StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  return LocateDeltaRuleState(GatedDeltaNetParams::From(values).Shape(), index);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
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
  k.state_layout = kDeltaRuleStateLayout;
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

DeltaRuleShape GatedDeltaNetParams::Shape() const {
  return {.heads = n_heads,
          .v_heads = n_v_heads,
          .k_dim = head_k_dim,
          .v_dim = head_v_dim,
          .conv_size = conv_size,
          .conv_bias = conv_bias,
          .decay = true,
          .beta = true,
          .gate = use_gate,
          .allow_neg_eigval = allow_neg_eigval,
          .norm_eps = norm_eps};
}

const MixerKind& GatedDeltaNetKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
