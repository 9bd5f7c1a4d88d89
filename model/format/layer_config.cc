#include "model/format/layer_config.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/format/field_reader.h"
#include "model/format/json_parse.h"
#include "model/layers/kinds.h"

namespace linserve {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxLayers = 1024;

template <typename Kind>
std::vector<std::string> KindNames(absl::Span<const Kind* const> kinds) {
  std::vector<std::string> names;
  for (const Kind* kind : kinds) names.push_back(kind->name);
  return names;
}

// Reads one component object at `path` ("layers[3].mixer") whose kind is one of `kinds`.
template <typename Kind>
absl::StatusOr<ComponentSpec> ParseComponent(const Json* value, std::string_view source,
                                             const std::string& path,
                                             absl::Span<const Kind* const> kinds,
                                             FieldReader& parent, std::string_view field) {
  if (value == nullptr) {
    return parent.Error(field, "is required (an object naming its \"kind\")");
  }
  if (!value->is_object()) {
    return parent.Error(
        field, absl::StrCat("must be an object naming its \"kind\", got ", DescribeJson(*value)));
  }
  FieldReader reader(*value, source, path + ".");
  const std::vector<std::string> names = KindNames(kinds);
  const Json* kind_value = reader.Find("kind");
  if (kind_value == nullptr) {
    return reader.Error(
        "kind", absl::StrCat("is required (one of \"", absl::StrJoin(names, "\", \""), "\")"));
  }
  int index = 0;
  if (absl::Status s = reader.Choice("kind", names, index); !s.ok()) return s;
  const Kind& kind = *kinds[static_cast<size_t>(index)];
  ComponentSpec spec{.kind = kind.name, .params = {}};
  for (const ParamSpec& param : kind.params) {
    if (absl::Status s = reader.Param(param, spec.params); !s.ok()) return s;
  }
  if (absl::Status s = reader.RejectUnknown(); !s.ok()) return s;
  if (kind.check != nullptr) {
    if (absl::Status s = kind.check(spec.params,
                                    [&](const std::string& param, const std::string& message) {
                                      return reader.Error(param, message);
                                    });
        !s.ok()) {
      return s;
    }
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::vector<LayerSpec>> ParseLayers(const Json& value, std::string_view source) {
  if (!value.is_array() || value.empty() || value.size() > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": field \"layers\": must be an array of 1 to ",
                     kMaxLayers, " layer objects, got ", DescribeJson(value),
                     value.is_array() ? absl::StrCat(" of ", value.size()) : ""));
  }
  std::vector<LayerSpec> layers;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string path = absl::StrCat("layers[", i, "]");
    const Json& layer = value[i];
    if (!layer.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source), ": field \"", path,
                       "\": must be an object with \"mixer\", \"norm\" and "
                       "\"mlp\", got ",
                       DescribeJson(layer)));
    }
    FieldReader reader(layer, source, path + ".");
    LayerSpec spec;
    absl::StatusOr<ComponentSpec> mixer = ParseComponent(
        reader.Find("mixer"), source, path + ".mixer", MixerKinds(), reader, "mixer");
    if (!mixer.ok()) return mixer.status();
    absl::StatusOr<ComponentSpec> norm =
        ParseComponent(reader.Find("norm"), source, path + ".norm", NormKinds(), reader, "norm");
    if (!norm.ok()) return norm.status();
    absl::StatusOr<ComponentSpec> mlp =
        ParseComponent(reader.Find("mlp"), source, path + ".mlp", MlpKinds(), reader, "mlp");
    if (!mlp.ok()) return mlp.status();
    if (absl::Status s = reader.RejectUnknown(); !s.ok()) return s;
    layers.push_back(
        LayerSpec{.mixer = *std::move(mixer), .norm = *std::move(norm), .mlp = *std::move(mlp)});
  }
  return layers;
}

absl::StatusOr<ComponentSpec> ParseFinalNorm(const Json& value, std::string_view source) {
  const Json wrapper = Json::object({{"final_norm", value}});
  FieldReader reader(wrapper, source);
  return ParseComponent(reader.Find("final_norm"), source, "final_norm", NormKinds(), reader,
                        "final_norm");
}

nlohmann::ordered_json ComponentToJson(const ComponentSpec& component) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["kind"] = component.kind;
  for (const auto& entry : component.params.entries()) {
    // A named reference, not a structured binding: clang before 16 (the fuzz build) cannot
    // capture a binding in a lambda.
    const std::string& name = entry.first;
    std::visit([&j, &name](const auto& v) { j[name] = v; }, entry.second);
  }
  return j;
}

}  // namespace linserve
