#include "model/layers/kinds.h"

#include <array>

#include "model/layers/ffn.h"
#include "model/layers/gated_mlp.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear_attention.h"
#include "model/layers/rms_norm.h"
#include "model/layers/short_conv.h"
#include "model/layers/taylor_linear_attention.h"
#include "model/layers/sliding_window_attention.h"

namespace linserve {
namespace {

template <typename Kind, size_t N>
const Kind* Find(const std::array<const Kind*, N>& kinds, std::string_view name) {
  for (const Kind* kind : kinds) {
    if (kind->name == name) return kind;
  }
  return nullptr;
}

const std::array<const MixerKind*, 4>& Mixers() {
  static const std::array<const MixerKind*, 4> kinds = {
      &LinearAttentionKind(), &ShortConvKind(), &TaylorLinearAttentionKind(),
      &SlidingWindowAttentionKind()};
  return kinds;
}
const std::array<const NormKind*, 2>& Norms() {
  static const std::array<const NormKind*, 2> kinds = {&LayerNormKind(), &RmsNormKind()};
  return kinds;
}
const std::array<const MlpKind*, 2>& Mlps() {
  static const std::array<const MlpKind*, 2> kinds = {&FfnKind(), &GatedMlpKind()};
  return kinds;
}

}  // namespace

absl::Span<const MixerKind* const> MixerKinds() { return Mixers(); }
absl::Span<const NormKind* const> NormKinds() { return Norms(); }
absl::Span<const MlpKind* const> MlpKinds() { return Mlps(); }

const MixerKind* FindMixerKind(std::string_view name) { return Find(Mixers(), name); }
const NormKind* FindNormKind(std::string_view name) { return Find(Norms(), name); }
const MlpKind* FindMlpKind(std::string_view name) { return Find(Mlps(), name); }

}  // namespace linserve
