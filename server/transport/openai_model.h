// The model object of GET /v1/models[/{id}] (docs/openai.md): OpenAI's fields, and as extensions
// what GetModelInfo reports of the layers and the state, whatever the layer kinds.
#ifndef LINSERVE_SERVER_TRANSPORT_OPENAI_MODEL_H_
#define LINSERVE_SERVER_TRANSPORT_OPENAI_MODEL_H_

#include <cstdint>
#include <string_view>

#include "model/format/config.h"
#include "nlohmann/json.hpp"

namespace linserve {

// {"id", "object": "model", "created", "owned_by": "linserve", and the extensions
// "state_bytes_per_session", "layers" (bottom first, each {"mixer", "norm", "mlp",
// "state_bytes"}, a component being {"kind", its parameters} as in config.json) and, for a
// pre-norm model, "final_norm"}.
nlohmann::json OpenAiModelJson(std::string_view id, int64_t created, const ModelConfig& config);

}  // namespace linserve

#endif  // LINSERVE_SERVER_TRANSPORT_OPENAI_MODEL_H_
