// WeightPrecision: how a backend stores the model's weight matrices (--weight_precision), and
// what each backend makes of a request. Embeddings, norms, biases, conv weights and the
// recurrent state stay fp32 on every backend; GEMMs accumulate in fp32.
#ifndef LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_
#define LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_

#include <string_view>

#include "absl/status/statusor.h"

namespace linserve {

enum class WeightPrecision {
  kAuto,  // the backend's own choice: bf16 on CUDA, fp32 on the CPU
  kFp32,
  kBf16,
  kFp16,
  kInt8,  // CPU only: one fp32 scale per block of 32 input features (kernels/cpu/packed_matrix.h)
};

// "auto", "fp32", "bf16", "fp16" or "int8"; anything else is INVALID_ARGUMENT naming the text
// and the accepted values.
absl::StatusOr<WeightPrecision> ParseWeightPrecision(std::string_view text);
std::string_view WeightPrecisionName(WeightPrecision precision);

// What the CPU backend stores: auto is fp32; every other value as requested.
WeightPrecision CpuWeightPrecision(WeightPrecision requested);
// What the CUDA backend stores: auto is bf16; int8 is INVALID_ARGUMENT (CUDA runs bf16, fp16
// and fp32 weights).
absl::StatusOr<WeightPrecision> CudaWeightPrecision(WeightPrecision requested);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_
