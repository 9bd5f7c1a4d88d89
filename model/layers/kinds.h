// The registry of layer component kinds: every mixer, norm and MLP kind config.json may name,
// in the order of model/layers/kind_list.inc (the one list of kinds).
#ifndef LINSERVE_MODEL_LAYERS_KINDS_H_
#define LINSERVE_MODEL_LAYERS_KINDS_H_

#include <string_view>

#include "absl/types/span.h"
#include "model/layers/component_kind.h"

namespace linserve {

// Each kind's declaration, defined in model/layers/<file>.cc.
#define LINSERVE_MIXER(Name, file) const MixerKind& Name##Kind();
#define LINSERVE_NORM(Name, file) const NormKind& Name##Kind();
#define LINSERVE_MLP(Name, file) const MlpKind& Name##Kind();
#include "model/layers/kind_list.inc"
#undef LINSERVE_MIXER
#undef LINSERVE_NORM
#undef LINSERVE_MLP

absl::Span<const MixerKind* const> MixerKinds();
absl::Span<const NormKind* const> NormKinds();
absl::Span<const MlpKind* const> MlpKinds();

// The kind named `name`, or null.
const MixerKind* FindMixerKind(std::string_view name);
const NormKind* FindNormKind(std::string_view name);
const MlpKind* FindMlpKind(std::string_view name);

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_KINDS_H_
