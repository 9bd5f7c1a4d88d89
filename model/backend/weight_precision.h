// WeightPrecision: how a backend stores the model's weight matrices (--weight_precision), and
// what each backend makes of a request. Embeddings, norms, biases and conv weights stay fp32 on
// every backend (the state's precision is --state_precision's, state_precision.h); GEMMs
// accumulate in fp32.
#ifndef LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_
#define LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "model/format/config.h"

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
// What the CPU backend stores for a model file whose projections are `stored`: a float file as
// above. An int8 file (config weight_format int8): auto and int8 run the stored q and scales as
// they are; fp32 widens them exactly (the weights q · scale the int8 kernels compute with);
// bf16 and fp16 are INVALID_ARGUMENT (they would round the quantized weights a second time).
absl::StatusOr<WeightPrecision> CpuWeightPrecision(WeightPrecision requested,
                                                   WeightFileFormat stored);
// What the CUDA backend stores: auto is bf16; int8 is INVALID_ARGUMENT (CUDA runs bf16, fp16
// and fp32 weights).
absl::StatusOr<WeightPrecision> CudaWeightPrecision(WeightPrecision requested);
// The same for a model file whose projections are `stored`: an int8 file is INVALID_ARGUMENT
// (the CUDA backend does not read the int8 file format), whatever was requested.
absl::StatusOr<WeightPrecision> CudaWeightPrecision(WeightPrecision requested,
                                                    WeightFileFormat stored);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_WEIGHT_PRECISION_H_
