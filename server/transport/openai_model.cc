#include "server/transport/openai_model.h"

#include <string>
#include <variant>
#include <vector>

#include "model/layers/layer_spec.h"

namespace linserve {
namespace {

using nlohmann::json;

// {"kind", every parameter with its JSON type}: the component as config.json writes it.
json ComponentJson(const ComponentSpec& component) {
  json out = {{"kind", component.kind}};
  for (const auto& [name, value] : component.params.entries()) {
    std::visit([&out, &param = name](const auto& v) { out[param] = v; }, value);
  }
  return out;
}

}  // namespace

json OpenAiModelJson(std::string_view id, int64_t created, const ModelConfig& config) {
  const std::vector<LayerSpec> layers = config.LayerList();
  const std::vector<int64_t> offsets = config.StateOffsets();
  json layer_list = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    layer_list.push_back(
        {{"mixer", ComponentJson(layers[i].mixer)},
         {"norm", ComponentJson(layers[i].norm)},
         {"mlp", ComponentJson(layers[i].mlp)},
         {"state_bytes", (offsets[i + 1] - offsets[i]) * static_cast<int64_t>(sizeof(float))}});
  }
  json model = {{"id", id},
                {"object", "model"},
                {"created", created},
                {"owned_by", "linserve"},
                {"state_bytes_per_session",
                 config.StateFloatsPerSlot() * static_cast<int64_t>(sizeof(float))},
                {"layers", std::move(layer_list)}};
  if (config.norm == NormPlacement::kPre) model["final_norm"] = ComponentJson(config.FinalNorm());
  return model;
}

}  // namespace linserve
