// The registry of layer component kinds: the one list of every mixer, norm and MLP kind
// config.json may name.
#ifndef LINSERVE_MODEL_LAYERS_KINDS_H_
#define LINSERVE_MODEL_LAYERS_KINDS_H_

#include <string_view>

#include "absl/types/span.h"
#include "model/layers/component_kind.h"

namespace linserve {

absl::Span<const MixerKind* const> MixerKinds();
absl::Span<const NormKind* const> NormKinds();
absl::Span<const MlpKind* const> MlpKinds();

// The kind named `name`, or null.
const MixerKind* FindMixerKind(std::string_view name);
const NormKind* FindNormKind(std::string_view name);
const MlpKind* FindMlpKind(std::string_view name);

}  // namespace linserve

#endif  // LINSERVE_MODEL_LAYERS_KINDS_H_
