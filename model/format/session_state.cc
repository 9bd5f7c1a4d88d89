#include "model/format/session_state.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/layers/kinds.h"

namespace linserve {

absl::Status ValidateSessionState(const ModelConfig& config, int64_t position,
                                  absl::Span<const float> state, float max_magnitude) {
  const std::vector<LayerSpec> layers = config.LayerList();
  const std::vector<int64_t> offsets = config.StateOffsets();
  for (size_t l = 0; l < layers.size(); ++l) {
    const ComponentSpec& mixer = layers[l].mixer;
    const MixerKind& kind = *FindMixerKind(mixer.kind);
    const absl::Span<const float> slice =
        state.subspan(static_cast<size_t>(offsets[l]),
                      static_cast<size_t>(offsets[l + 1] - offsets[l]));
    if (std::optional<StateProblem> problem =
            kind.check_state(mixer.params, slice, max_magnitude)) {
      return absl::InvalidArgumentError(
          absl::StrCat("state[", offsets[l] + problem->index, "] (layer ", l, ", ",
                       kind.locate_state(mixer.params, problem->index), "): ", problem->what));
    }
  }
  // A state at position 0 has consumed nothing: it must be the initial one (a session there
  // starts from, and leaves, shared prefix states, so a crafted one would poison others).
  if (position == 0) {
    for (size_t i = 0; i < state.size(); ++i) {
      if (state[i] != 0.0f) {
        return absl::InvalidArgumentError(
            absl::StrCat("state[", i, "]: ", state[i],
                         " at position 0, where the state must be the initial one (all zeros)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace linserve
