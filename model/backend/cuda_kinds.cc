#include "model/backend/cuda_kinds.h"

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/layers/ffn.h"
#include "model/layers/layer_norm.h"
#include "model/layers/linear_attention.h"
#include "model/layers/sliding_window_attention.h"

namespace linserve {
namespace {

// Keep in step with the tables of model/backend/cuda/cuda_layer.cc.
bool Implemented(std::string_view kind) {
  const std::array<const ComponentKind*, 4> kinds = {
      &LinearAttentionKind(), &SlidingWindowAttentionKind(), &LayerNormKind(), &FfnKind()};
  for (const ComponentKind* k : kinds) {
    if (k->name == kind) return true;
  }
  return false;
}

absl::Status Refuse(const std::string& field, const std::string& kind) {
  return absl::UnimplementedError(absl::StrCat(
      field, ".kind = \"", kind,
      "\": the CUDA backend does not implement this kind (it implements linear_attention, "
      "sliding_window_attention, layer_norm and ffn); use the CPU backend (--device cpu)"));
}

}  // namespace

absl::Status CheckCudaImplementsKinds(const ModelConfig& config) {
  const std::vector<LayerSpec> layers = config.LayerList();
  for (size_t l = 0; l < layers.size(); ++l) {
    const std::string prefix = absl::StrCat("layers[", l, "]");
    for (const auto& [role, spec] : {std::pair{"mixer", &layers[l].mixer},
                                     std::pair{"norm", &layers[l].norm},
                                     std::pair{"mlp", &layers[l].mlp}}) {
      if (!Implemented(spec->kind)) return Refuse(absl::StrCat(prefix, ".", role), spec->kind);
    }
  }
  if (config.norm == NormPlacement::kPre && !Implemented(config.FinalNorm().kind)) {
    return Refuse("final_norm", config.FinalNorm().kind);
  }
  return absl::OkStatus();
}

}  // namespace linserve
