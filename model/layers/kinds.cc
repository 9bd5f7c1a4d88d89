#include "model/layers/kinds.h"

#include <cstdio>
#include <cstdlib>
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

// `kind`, whose name must be its line's `file` (the reference finds its module by that name).
template <typename Kind>
const Kind* Checked(const Kind* kind, std::string_view file) {
  if (kind->name != file) {
    std::fprintf(stderr, "model/layers/kind_list.inc: the kind of line \"%.*s\" is named \"%s\"\n",
                 static_cast<int>(file.size()), file.data(), kind->name.c_str());
    std::abort();
  }
  return kind;
}

struct Registry {
  std::vector<const MixerKind*> mixers;
  std::vector<const NormKind*> norms;
  std::vector<const MlpKind*> mlps;
};

const Registry& Kinds() {
  static const Registry* const registry = [] {
    auto* r = new Registry;
#define LINSERVE_MIXER(Name, file) r->mixers.push_back(Checked(&Name##Kind(), #file));
#define LINSERVE_NORM(Name, file) r->norms.push_back(Checked(&Name##Kind(), #file));
#define LINSERVE_MLP(Name, file) r->mlps.push_back(Checked(&Name##Kind(), #file));
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
