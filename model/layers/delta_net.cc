#include "model/layers/delta_net.h"

#include <string>
#include <utility>
#include <vector>

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  return DeltaRuleTensors(DeltaNetParams::From(values).Shape(), d);
}

int64_t StateFloats(const ParamValues& values) {
  return DeltaNetParams::From(values).Shape().StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  return LocateDeltaRuleState(DeltaNetParams::From(values).Shape(), index);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "delta_net";
  k.doc =
      "DeltaNet (fla's DeltaNet): the delta rule on L2-normalised q/k after short "
      "convolutions, a per-head RMSNorm on the output";
  ParamSpec conv_size = IntParam("conv_size", 2, 64,
                                 "taps of the short convolutions on q, k and v, the current "
                                 "token's included");
  conv_size.default_value = int64_t{4};  // Default: 4 (fla's conv_size)
  k.params = {
      IntParam("n_heads", 1, 1024, "heads"),
      IntParam("head_k_dim", 1, 1024, "width of each q and k head"),
      IntParam("head_v_dim", 1, 1024, "width of each value head"),
      std::move(conv_size),
      BoolParam("conv_bias", false, "biases on the short convolutions"),
      BoolParam("use_beta", true, "β = sigmoid(b_proj(x)); without it β = 1"),
      BoolParam("use_gate", false, "the output gate: o_norm(o) ⊙ silu(g_proj(x))"),
      BoolParam("allow_neg_eigval", false,
                "β doubled: in (0, 2) instead of (0, 1), or 2 without use_beta"),
      EpsilonParam("norm_eps", 1e-5, "eps of the output's per-head RMSNorm"),
  };
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout = kDeltaRuleStateLayout;
  k.locate_state = LocateState;
  k.check_state = CheckState;
  return k;
}

}  // namespace

DeltaNetParams DeltaNetParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_k_dim = static_cast<int32_t>(v.Int("head_k_dim")),
          .head_v_dim = static_cast<int32_t>(v.Int("head_v_dim")),
          .conv_size = static_cast<int32_t>(v.Int("conv_size")),
          .conv_bias = v.Bool("conv_bias"),
          .use_beta = v.Bool("use_beta"),
          .use_gate = v.Bool("use_gate"),
          .allow_neg_eigval = v.Bool("allow_neg_eigval"),
          .norm_eps = v.Number("norm_eps")};
}

ParamValues DeltaNetParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_k_dim", int64_t{head_k_dim});
  v.Set("head_v_dim", int64_t{head_v_dim});
  v.Set("conv_size", int64_t{conv_size});
  v.Set("conv_bias", conv_bias);
  v.Set("use_beta", use_beta);
  v.Set("use_gate", use_gate);
  v.Set("allow_neg_eigval", allow_neg_eigval);
  v.Set("norm_eps", norm_eps);
  return v;
}

DeltaRuleShape DeltaNetParams::Shape() const {
  return {.heads = n_heads,
          .v_heads = n_heads,
          .k_dim = head_k_dim,
          .v_dim = head_v_dim,
          .conv_size = conv_size,
          .conv_bias = conv_bias,
          .decay = false,
          .beta = use_beta,
          .gate = use_gate,
          .allow_neg_eigval = allow_neg_eigval,
          .norm_eps = norm_eps};
}

const MixerKind& DeltaNetKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
