#include "model/backend/weight_precision.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace linserve {

absl::StatusOr<WeightPrecision> ParseWeightPrecision(std::string_view text) {
  for (WeightPrecision p : {WeightPrecision::kAuto, WeightPrecision::kFp32, WeightPrecision::kBf16,
                            WeightPrecision::kFp16, WeightPrecision::kInt8}) {
    if (text == WeightPrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "weight_precision \"", std::string(text), "\" is not one of auto, fp32, bf16, fp16, int8"));
}

std::string_view WeightPrecisionName(WeightPrecision precision) {
  switch (precision) {
    case WeightPrecision::kAuto:
      return "auto";
    case WeightPrecision::kFp32:
      return "fp32";
    case WeightPrecision::kBf16:
      return "bf16";
    case WeightPrecision::kFp16:
      return "fp16";
    case WeightPrecision::kInt8:
      return "int8";
  }
  return "?";
}

WeightPrecision CpuWeightPrecision(WeightPrecision requested) {
  return requested == WeightPrecision::kAuto ? WeightPrecision::kFp32 : requested;
}

absl::StatusOr<WeightPrecision> CpuWeightPrecision(WeightPrecision requested,
                                                   WeightFileFormat stored) {
  if (stored == WeightFileFormat::kFloat) return CpuWeightPrecision(requested);
  switch (requested) {
    case WeightPrecision::kAuto:
    case WeightPrecision::kInt8:
      return WeightPrecision::kInt8;
    case WeightPrecision::kFp32:
      return WeightPrecision::kFp32;
    case WeightPrecision::kBf16:
    case WeightPrecision::kFp16:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "weight_precision ", std::string(WeightPrecisionName(requested)),
      ": the model file stores its weights int8 (config.json weight_format), which the CPU "
      "backend runs as int8 (auto, int8) or widens to fp32; convert the float model to ",
      std::string(WeightPrecisionName(requested)), " instead"));
}

absl::StatusOr<WeightPrecision> CudaWeightPrecision(WeightPrecision requested,
                                                    WeightFileFormat stored) {
  if (stored == WeightFileFormat::kInt8) {
    return absl::InvalidArgumentError(
        "model file format int8 (config.json weight_format): the CUDA backend does not read "
        "int8-stored weights; serve this model with --device=cpu, or give the CUDA backend the "
        "float model it was converted from");
  }
  return CudaWeightPrecision(requested);
}

absl::StatusOr<WeightPrecision> CudaWeightPrecision(WeightPrecision requested) {
  if (requested == WeightPrecision::kInt8) {
    return absl::InvalidArgumentError(
        "weight_precision int8: the CUDA backend runs bf16, fp16 or fp32 weights (auto = bf16); "
        "int8 is for --device=cpu");
  }
  return requested == WeightPrecision::kAuto ? WeightPrecision::kBf16 : requested;
}

}  // namespace linserve
