#include "model/layers/kinds.h"

#include <vector>

namespace linserve {

namespace {

template <typename Kind>
const Kind* Find(absl::Span<const Kind* const> kinds, std::string_view name) {
  for (const Kind* kind : kinds) {
    if (kind->name == name) return kind;
  }
  return nullptr;
}

struct Registry {
  std::vector<const MixerKind*> mixers;
  std::vector<const NormKind*> norms;
  std::vector<const MlpKind*> mlps;
};

const Registry& Kinds() {
  static const Registry* const registry = [] {
    auto* r = new Registry;
#define LINSERVE_MIXER(Name, file) r->mixers.push_back(&Name##Kind());
#define LINSERVE_NORM(Name, file) r->norms.push_back(&Name##Kind());
#define LINSERVE_MLP(Name, file) r->mlps.push_back(&Name##Kind());
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP
    return r;
  }();
  return *registry;
}

}  // namespace

absl::Span<const MixerKind* const> MixerKinds() { return Kinds().mixers; }
absl::Span<const NormKind* const> NormKinds() { return Kinds().norms; }
absl::Span<const MlpKind* const> MlpKinds() { return Kinds().mlps; }

const MixerKind* FindMixerKind(std::string_view name) { return Find(MixerKinds(), name); }
const NormKind* FindNormKind(std::string_view name) { return Find(NormKinds(), name); }
const MlpKind* FindMlpKind(std::string_view name) { return Find(MlpKinds(), name); }

}  // namespace linserve
