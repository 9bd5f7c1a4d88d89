#include "model/layers/mamba2.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

absl::Status Check(const ParamValues& values, ParamErrorFn error) {
  const Mamba2Params p = Mamba2Params::From(values);
  if (p.n_heads % p.n_groups != 0) {
    return error("n_groups",
                 absl::StrCat("must divide n_heads (", p.n_heads, "), got ", p.n_groups));
  }
  if (p.dt_limit_min > p.dt_limit_max) {
    return error("dt_limit_max", absl::StrCat("must be at least dt_limit_min (", p.dt_limit_min,
                                              "), got ", p.dt_limit_max));
  }
  return absl::OkStatus();
}

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const Mamba2Params p = Mamba2Params::From(values);
  const int64_t di = p.InnerDim();
  const int64_t h = p.n_heads;
  std::vector<TensorDecl> t = {{"mamba.in_proj.weight", {p.InColumns(), d}, /*projection=*/true}};
  if (p.bias) t.push_back({"mamba.in_proj.bias", {p.InColumns()}});
  t.push_back({"mamba.conv1d.weight", {p.ConvChannels(), p.conv_size}});
  if (p.conv_bias) t.push_back({"mamba.conv1d.bias", {p.ConvChannels()}});
  t.push_back({"mamba.dt_bias", {h}});
  t.push_back({"mamba.A_log", {h}});
  t.push_back({"mamba.D", {p.d_has_hdim ? di : h}});
  if (p.rmsnorm) t.push_back({"mamba.norm.weight", {di}});
  t.push_back({"mamba.out_proj.weight", {d, di}, /*projection=*/true});
  if (p.bias) t.push_back({"mamba.out_proj.bias", {d}});
  return t;
}

int64_t StateFloats(const ParamValues& values) { return Mamba2Params::From(values).StateFloats(); }

std::string LocateState(const ParamValues& values, int64_t index) {
  const Mamba2Params p = Mamba2Params::From(values);
  if (index < p.HistoryOffset()) {
    const int64_t per_head = int64_t{p.state_size} * p.head_dim;
    const int64_t in_head = index % per_head;
    return absl::StrCat("head ", index / per_head, ", S[", in_head / p.head_dim, "][",
                        in_head % p.head_dim, "]");
  }
  const int64_t in_history = index - p.HistoryOffset();
  const int64_t row = in_history / p.ConvChannels();
  int64_t channel = in_history % p.ConvChannels();
  const char* which = "x";
  if (channel >= p.InnerDim() + p.GroupStateDim()) {
    which = "C";
    channel -= p.InnerDim() + p.GroupStateDim();
  } else if (channel >= p.InnerDim()) {
    which = "B";
    channel -= p.InnerDim();
  }
  return absl::StrCat(which, " of token t-", p.conv_size - 2 - row, " (history row ", row,
                      "), channel ", channel);
}

std::optional<StateProblem> CheckState(const ParamValues&, absl::Span<const float> slice,
                                       float max_magnitude) {
  return CheckStateValues(slice, max_magnitude);
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "mamba2";
  k.doc =
      "Mamba-2's SSD layer (fla's Mamba2): a selective state space with a scalar decay per head "
      "from dt and A, B/C/x through a short convolution, a D skip and a grouped gated RMSNorm";
  ParamSpec n_groups = IntParam("n_groups", 1, 1024, "groups sharing B and C; divides n_heads");
  n_groups.default_value = int64_t{1};  // Default: 1 (fla's n_groups)
  ParamSpec conv_size = IntParam("conv_size", 2, 64,
                                 "taps of the convolution on x, B and C, the current "
                                 "token's included");
  conv_size.default_value = int64_t{4};  // Default: 4 (fla's conv_kernel)
  k.params = {
      IntParam("n_heads", 1, 1024, "heads"),
      IntParam("head_dim", 1, 1024, "width of each head's x (P)"),
      IntParam("state_size", 1, 1024, "width of B and C per group (N)"),
      std::move(n_groups),
      std::move(conv_size),
      BoolParam("conv_bias", true, "a bias on the convolution"),
      BoolParam("bias", false, "biases on in_proj and out_proj"),
      BoolParam("d_has_hdim", false, "D per channel (d_inner) instead of per head"),
      BoolParam("rmsnorm", true,
                "the grouped RMSNorm (weight norm) with the gate; else y ⊙ silu(z)"),
      BoolParam("norm_before_gate", false, "norm(y) ⊙ silu(z) instead of norm(y ⊙ silu(z))"),
      NumberParam("dt_limit_min", 0, 1e30, /*min_exclusive=*/false, 0, "dt's floor"),
      NumberParam("dt_limit_max", 0, 1e30, /*min_exclusive=*/false, 1e30,
                  "dt's ceiling (the default 1e30 stands for fla's inf: no finite float dt a "
                  "model reaches is above it)"),
      EpsilonParam("norm_eps", 1e-5, "eps of the grouped RMSNorm"),
  };
  k.check = Check;
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout =
      "per head S (state_size × head_dim, row-major); then the last conv_size − 1 rows of x | B | "
      "C before the convolution, oldest first: (conv_size − 1) × (d_inner + 2 · n_groups · "
      "state_size)";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  k.bf16_state = true;
  return k;
}

}  // namespace

Mamba2Params Mamba2Params::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_dim = static_cast<int32_t>(v.Int("head_dim")),
          .state_size = static_cast<int32_t>(v.Int("state_size")),
          .n_groups = static_cast<int32_t>(v.Int("n_groups")),
          .conv_size = static_cast<int32_t>(v.Int("conv_size")),
          .conv_bias = v.Bool("conv_bias"),
          .bias = v.Bool("bias"),
          .d_has_hdim = v.Bool("d_has_hdim"),
          .rmsnorm = v.Bool("rmsnorm"),
          .norm_before_gate = v.Bool("norm_before_gate"),
          .dt_limit_min = v.Number("dt_limit_min"),
          .dt_limit_max = v.Number("dt_limit_max"),
          .norm_eps = v.Number("norm_eps")};
}

ParamValues Mamba2Params::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_dim", int64_t{head_dim});
  v.Set("state_size", int64_t{state_size});
  v.Set("n_groups", int64_t{n_groups});
  v.Set("conv_size", int64_t{conv_size});
  v.Set("conv_bias", conv_bias);
  v.Set("bias", bias);
  v.Set("d_has_hdim", d_has_hdim);
  v.Set("rmsnorm", rmsnorm);
  v.Set("norm_before_gate", norm_before_gate);
  v.Set("dt_limit_min", dt_limit_min);
  v.Set("dt_limit_max", dt_limit_max);
  v.Set("norm_eps", norm_eps);
  return v;
}

const MixerKind& Mamba2Kind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
