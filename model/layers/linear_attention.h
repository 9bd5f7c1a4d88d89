// The "linear_attention" mixer (Katharopoulos et al. 2020; docs/architecture.md §4):
//   q, k, v = x Wq + bq, x Wk + bk, x Wv + bv        split into n_heads × head_dim
//   per head:  S_t = S_{t-1} + φ(k_t) v_tᵀ,   z_t = z_{t-1} + φ(k_t)
//              o_t = φ(q_t)ᵀ S_t / (φ(q_t)ᵀ z_t + eps)
//   out = concat_heads(o_t) Wo + bo
// Its state slice, per head: S (feature_dim × head_dim, row-major) then z (feature_dim).
#ifndef LINSERVE_MODEL_LAYERS_LINEAR_ATTENTION_H_
#define LINSERVE_MODEL_LAYERS_LINEAR_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "model/layers/component_kind.h"
#include "model/layers/param.h"

namespace linserve {

// "elu_plus_one" | "relu" | "exp" | "favor_plus"
enum class FeatureMap { kEluPlusOne, kRelu, kExp, kFavorPlus };
std::string_view ToString(FeatureMap v);
// The value named `name`, or none.
std::optional<FeatureMap> FeatureMapFromString(std::string_view name);

// The parameters of one linear_attention mixer, typed.
struct LinearAttentionParams {
  int32_t n_heads = 0;
  int32_t head_dim = 0;
  // Width of φ(x): head_dim for every map but favor_plus (its number of random features).
  int32_t feature_dim = 0;
  FeatureMap feature_map = FeatureMap::kEluPlusOne;
  double eps = 1e-6;  // denominator guard
  bool bias = true;   // biases on q/k/v/o

  static LinearAttentionParams From(const ParamValues& values);
  ParamValues ToValues() const;
  // n_heads · feature_dim · (head_dim + 1).
  int64_t StateFloats() const;
};

const MixerKind& LinearAttentionKind();

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_LINEAR_ATTENTION_H_
