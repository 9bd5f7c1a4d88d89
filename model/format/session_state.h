// A session's state as the model defines it: the layers' mixer slices concatenated, bottom first
// (ModelConfig::StateOffsets), each slice laid out as its kind declares (model/layers/). Code
// outside the model (sessions, snapshots, prefix states) treats a state as
// ModelConfig::StateFloatsPerSlot() floats and asks this file whether one is acceptable.
#ifndef LINSERVE_MODEL_FORMAT_SESSION_STATE_H_
#define LINSERVE_MODEL_FORMAT_SESSION_STATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "model/format/config.h"

namespace linserve {

// Checks a state from outside the server (an imported snapshot) before a session may hold it:
// each layer's slice passes its kind's check (finite values within `max_magnitude`, and what the
// kind itself requires), and at `position` 0 the state is the initial one, all zeros. `state`
// must have StateFloatsPerSlot() floats. Errors are INVALID_ARGUMENT and locate the value:
// "state[7] (layer 0, head 0, S[0][7]): -1e+38 exceeds the magnitude bound 1e+18".
absl::Status ValidateSessionState(const ModelConfig& config, int64_t position,
                                  absl::Span<const float> state, float max_magnitude);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_SESSION_STATE_H_
