#include "model/backend/state_precision.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/layers/kinds.h"

namespace linserve {

absl::StatusOr<StatePrecision> ParseStatePrecision(std::string_view text) {
  for (StatePrecision p : {StatePrecision::kFp32, StatePrecision::kBf16}) {
    if (text == StatePrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("state_precision \"", std::string(text), "\" is not one of fp32, bf16"));
}

std::string_view StatePrecisionName(StatePrecision precision) {
  switch (precision) {
    case StatePrecision::kFp32:
      return "fp32";
    case StatePrecision::kBf16:
      return "bf16";
  }
  return "?";
}

int64_t StateElementBytes(StatePrecision precision) {
  return precision == StatePrecision::kBf16 ? 2 : 4;
}

absl::Status CheckCpuStatePrecision(StatePrecision requested) {
  if (requested == StatePrecision::kFp32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "state_precision ", std::string(StatePrecisionName(requested)),
      ": the CPU backend stores the state in fp32 only; bf16 is for --device=cuda"));
}

absl::Status CheckCudaStatePrecision(StatePrecision requested, const ModelConfig& config) {
  if (requested == StatePrecision::kFp32) return absl::OkStatus();
  const std::vector<LayerSpec> layers = config.LayerList();
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string& kind = layers[i].mixer.kind;
    const MixerKind* mixer = FindMixerKind(kind);
    if (mixer == nullptr || !mixer->bf16_state) {
      std::vector<std::string> bf16;
      for (const MixerKind* k : MixerKinds()) {
        if (k->bf16_state) bf16.push_back(k->name);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "state_precision ", std::string(StatePrecisionName(requested)), ": layer ", i,
          "'s mixer is ", kind, ", whose state the CUDA backend keeps in fp32 only; bf16 needs ",
          "every mixer to be one of ", absl::StrJoin(bf16, ", "),
          " (use --state_precision=fp32)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace linserve
