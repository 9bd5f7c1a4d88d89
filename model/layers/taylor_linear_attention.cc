#include "model/layers/taylor_linear_attention.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(values);
  const int64_t hf = int64_t{p.n_heads} * p.feature_dim;
  const int64_t hd = int64_t{p.n_heads} * p.head_dim;
  return {
      {"attn.q_proj.weight", {hf, d}, /*projection=*/true},
      {"attn.k_proj.weight", {hf, d}, /*projection=*/true},
      {"attn.v_proj.weight", {hd, d}, /*projection=*/true},
      {"attn.o_proj.weight", {d, hd}, /*projection=*/true},
  };
}

int64_t StateFloats(const ParamValues& values) {
  return TaylorLinearAttentionParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(values);
  const int64_t features = p.Features();
  const int64_t s_floats = features * p.head_dim;
  const int64_t head_floats = s_floats + features;
  const int64_t offset = index % head_floats;
  return absl::StrCat(
      "head ", index / head_floats, ", ",
      offset >= s_floats ? absl::StrCat("z[", offset - s_floats, "]")
                         : absl::StrCat("S[", offset / p.head_dim, "][", offset % p.head_dim, "]"));
}

// z[0] sums the constant feature 1: it counts the tokens seen and cannot be negative. The other
// features of φ may be negative, and so may the rest of z.
std::optional<StateProblem> CheckState(const ParamValues& values, absl::Span<const float> slice,
                                       float max_magnitude) {
  const TaylorLinearAttentionParams p = TaylorLinearAttentionParams::From(values);
  const size_t s_floats = static_cast<size_t>(p.Features()) * p.head_dim;
  const size_t head_floats = s_floats + static_cast<size_t>(p.Features());
  for (size_t i = 0; i < slice.size(); ++i) {
    const float x = slice[i];
    if (std::optional<std::string> bad = CheckStateValue(x, max_magnitude)) {
      return StateProblem{static_cast<int64_t>(i), *std::move(bad)};
    }
    if (i % head_floats == s_floats && x < 0.0f) {
      return StateProblem{static_cast<int64_t>(i),
                          absl::StrCat(x, " is negative (z[0] counts the tokens)")};
    }
  }
  return std::nullopt;
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "taylor_linear_attention";
  k.doc =
      "causal linear attention with the second-order Taylor feature map φ(x) = [1, x/d_f^¼, "
      "vec(xxᵀ)/(√2·√d_f)]: per head S += φ(k)vᵀ, z += φ(k), out φ(q)ᵀS / (φ(q)ᵀz + eps)";
  k.params = {
      IntParam("n_heads", 1, 1024, "attention heads"),
      IntParam("feature_dim", 1, 64,
               "d_f: the width of each head's q and k; φ has 1 + d_f + d_f² features"),
      IntParam("head_dim", 1, 4096, "the width of each head's v and output"),
      EpsilonParam("eps", 1e-12, "denominator guard in φ(q)ᵀS / (φ(q)ᵀz + eps)"),
  };
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout =
      "per head: S (F × head_dim, row-major), then z (F), F = 1 + feature_dim + feature_dim²";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  k.bf16_state = true;
  return k;
}

}  // namespace

TaylorLinearAttentionParams TaylorLinearAttentionParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .feature_dim = static_cast<int32_t>(v.Int("feature_dim")),
          .head_dim = static_cast<int32_t>(v.Int("head_dim")),
          .eps = v.Number("eps")};
}

ParamValues TaylorLinearAttentionParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("feature_dim", int64_t{feature_dim});
  v.Set("head_dim", int64_t{head_dim});
  v.Set("eps", eps);
  return v;
}

int64_t TaylorLinearAttentionParams::Features() const {
  return 1 + int64_t{feature_dim} + int64_t{feature_dim} * feature_dim;
}

int64_t TaylorLinearAttentionParams::StateFloats() const {
  return int64_t{n_heads} * Features() * (int64_t{head_dim} + 1);
}

const MixerKind& TaylorLinearAttentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
