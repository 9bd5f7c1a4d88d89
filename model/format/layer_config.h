// config.json's "layers" and "final_norm": each component an object naming its kind and giving
// that kind's parameters (model/layers/kinds.h), read and written here. Internal to
// linserve_model_format (config.cc).
#ifndef LINSERVE_MODEL_FORMAT_LAYER_CONFIG_H_
#define LINSERVE_MODEL_FORMAT_LAYER_CONFIG_H_

#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/layers/layer_spec.h"
#include "nlohmann/json.hpp"

namespace linserve {

// Reads "layers" (`value`): an array of 1 to 1024 objects {"mixer": C, "norm": C, "mlp": C}, C
// being {"kind": NAME, PARAM: VALUE, ...}. Errors name the field ("layers[3].mixer.kind").
absl::StatusOr<std::vector<LayerSpec>> ParseLayers(const nlohmann::json& value,
                                                   std::string_view source);
// Reads "final_norm": a norm component.
absl::StatusOr<ComponentSpec> ParseFinalNorm(const nlohmann::json& value, std::string_view source);

// {"kind": ..., params in their kind's order}.
nlohmann::ordered_json ComponentToJson(const ComponentSpec& component);

}  // namespace linserve

#endif  // LINSERVE_MODEL_FORMAT_LAYER_CONFIG_H_
