#include "model/layers/linear_attention.h"

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace linserve {
namespace {

constexpr std::array<std::pair<FeatureMap, std::string_view>, 4> kFeatureMapNames = {{
    {FeatureMap::kEluPlusOne, "elu_plus_one"},
    {FeatureMap::kRelu, "relu"},
    {FeatureMap::kExp, "exp"},
    {FeatureMap::kFavorPlus, "favor_plus"},
}};

absl::Status Check(const ParamValues& values, ParamErrorFn error) {
  const LinearAttentionParams p = LinearAttentionParams::From(values);
  if (p.feature_map != FeatureMap::kFavorPlus && p.feature_dim != p.head_dim) {
    return error("feature_dim",
                 absl::StrCat("must equal head_dim (", p.head_dim, ") for feature_map \"",
                              std::string(ToString(p.feature_map)), "\", got ", p.feature_dim,
                              "; only favor_plus has its own feature count"));
  }
  return absl::OkStatus();
}

std::vector<TensorDecl> Tensors(const ParamValues& values, int64_t d) {
  const LinearAttentionParams p = LinearAttentionParams::From(values);
  const int64_t hd = int64_t{p.n_heads} * p.head_dim;
  std::vector<TensorDecl> t = {
      {"attn.q_proj.weight", {hd, d}, /*projection=*/true}, {"attn.q_proj.bias", {hd}},
      {"attn.k_proj.weight", {hd, d}, /*projection=*/true}, {"attn.k_proj.bias", {hd}},
      {"attn.v_proj.weight", {hd, d}, /*projection=*/true}, {"attn.v_proj.bias", {hd}},
      {"attn.o_proj.weight", {d, hd}, /*projection=*/true}, {"attn.o_proj.bias", {d}},
  };
  if (!p.bias) {
    std::erase_if(t, [](const TensorDecl& decl) { return decl.name.ends_with(".bias"); });
  }
  if (p.feature_map == FeatureMap::kFavorPlus) {
    t.push_back({"attn.favor_projection", {int64_t{p.feature_dim}, int64_t{p.head_dim}}});
  }
  return t;
}

int64_t StateFloats(const ParamValues& values) {
  return LinearAttentionParams::From(values).StateFloats();
}

std::string LocateState(const ParamValues& values, int64_t index) {
  const LinearAttentionParams p = LinearAttentionParams::From(values);
  const int64_t s_floats = int64_t{p.feature_dim} * p.head_dim;
  const int64_t head_floats = s_floats + p.feature_dim;
  const int64_t offset = index % head_floats;
  return absl::StrCat(
      "head ", index / head_floats, ", ",
      offset >= s_floats ? absl::StrCat("z[", offset - s_floats, "]")
                         : absl::StrCat("S[", offset / p.head_dim, "][", offset % p.head_dim, "]"));
}

// z is a sum of non-negative features φ(k), whatever the feature map, so that the denominator
// φ(q)ᵀz + eps stays positive.
std::optional<StateProblem> CheckState(const ParamValues& values, absl::Span<const float> slice,
                                       float max_magnitude) {
  const LinearAttentionParams p = LinearAttentionParams::From(values);
  const size_t s_floats = static_cast<size_t>(p.feature_dim) * p.head_dim;
  const size_t head_floats = s_floats + static_cast<size_t>(p.feature_dim);
  for (size_t i = 0; i < slice.size(); ++i) {
    const float x = slice[i];
    if (std::optional<std::string> bad = CheckStateValue(x, max_magnitude)) {
      return StateProblem{static_cast<int64_t>(i), *std::move(bad)};
    }
    if (i % head_floats >= s_floats && x < 0.0f) {
      return StateProblem{static_cast<int64_t>(i),
                          absl::StrCat(x, " is negative (z sums non-negative features)")};
    }
  }
  return std::nullopt;
}

MixerKind MakeKind() {
  MixerKind k;
  k.name = "linear_attention";
  k.doc = "causal linear attention: per head S += φ(k)vᵀ, z += φ(k), out φ(q)ᵀS / (φ(q)ᵀz + eps)";
  std::vector<std::string> maps;
  for (const auto& [value, text] : kFeatureMapNames) maps.emplace_back(text);
  k.params = {
      IntParam("n_heads", 1, 1024, "attention heads"),
      IntParam("head_dim", 1, 4096, "width of each head's q, k and v"),
      IntParam("feature_dim", 1, 16384,
               "width of φ(x): head_dim for every map but favor_plus, where it is the number of "
               "random features m",
               /*default_from=*/"head_dim"),
      ChoiceParam("feature_map", maps, "elu_plus_one", "φ (docs/architecture.md §4)"),
      EpsilonParam("eps", 1e-6, "denominator guard in φ(q)ᵀS / (φ(q)ᵀz + eps)"),
      BoolParam("bias", true, "biases on the q, k, v and o projections"),
  };
  k.check = Check;
  k.tensors = Tensors;
  k.state_floats = StateFloats;
  k.state_layout = "per head: S (feature_dim × head_dim, row-major), then z (feature_dim)";
  k.locate_state = LocateState;
  k.check_state = CheckState;
  k.bf16_state = true;
  return k;
}

}  // namespace

std::optional<FeatureMap> FeatureMapFromString(std::string_view name) {
  for (const auto& [value, text] : kFeatureMapNames) {
    if (text == name) return value;
  }
  return std::nullopt;
}

std::string_view ToString(FeatureMap v) {
  for (const auto& [value, text] : kFeatureMapNames) {
    if (value == v) return text;
  }
  return "unknown";
}

LinearAttentionParams LinearAttentionParams::From(const ParamValues& v) {
  return {.n_heads = static_cast<int32_t>(v.Int("n_heads")),
          .head_dim = static_cast<int32_t>(v.Int("head_dim")),
          .feature_dim = static_cast<int32_t>(v.Int("feature_dim")),
          .feature_map = *FeatureMapFromString(v.Choice("feature_map")),
          .eps = v.Number("eps"),
          .bias = v.Bool("bias")};
}

ParamValues LinearAttentionParams::ToValues() const {
  ParamValues v;
  v.Set("n_heads", int64_t{n_heads});
  v.Set("head_dim", int64_t{head_dim});
  v.Set("feature_dim", int64_t{feature_dim});
  v.Set("feature_map", std::string(ToString(feature_map)));
  v.Set("eps", eps);
  v.Set("bias", bias);
  return v;
}

int64_t LinearAttentionParams::StateFloats() const {
  return int64_t{n_heads} * feature_dim * (int64_t{head_dim} + 1);
}

const MixerKind& LinearAttentionKind() {
  static const MixerKind kind = MakeKind();
  return kind;
}

}  // namespace linserve
