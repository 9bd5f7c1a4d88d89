// StatePrecision: how a backend stores the recurrent state of its slots (--state_precision), and
// what each backend makes of a request. Whatever a backend stores, the state crosses its
// boundary (ReadSlot / WriteSlot: export, import, snapshots, persistence, prefix states) as the
// fp32 StateBlob, so files and other replicas never see the difference.
#ifndef LINSERVE_MODEL_BACKEND_STATE_PRECISION_H_
#define LINSERVE_MODEL_BACKEND_STATE_PRECISION_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/format/config.h"

namespace linserve {

enum class StatePrecision {
  kFp32,
  kBf16,  // CUDA only, models whose mixers all allow it (MixerKind::bf16_state)
};

// "fp32" or "bf16"; anything else is INVALID_ARGUMENT naming the text and the accepted values.
absl::StatusOr<StatePrecision> ParseStatePrecision(std::string_view text);
std::string_view StatePrecisionName(StatePrecision precision);
// Bytes per stored state element: 4 for fp32, 2 for bf16.
int64_t StateElementBytes(StatePrecision precision);

// The CPU backend stores fp32 only: bf16 is INVALID_ARGUMENT naming the flag.
absl::Status CheckCpuStatePrecision(StatePrecision requested);
// The CUDA backend stores fp32 for every model, and bf16 when every layer's mixer kind says it
// may (MixerKind::bf16_state: linear_attention, taylor_linear_attention, short_conv and mamba2,
// their state accumulated in fp32 in the kernels); otherwise INVALID_ARGUMENT naming the flag, the
// layer, its kind and the kinds that may.
absl::Status CheckCudaStatePrecision(StatePrecision requested, const ModelConfig& config);

}  // namespace linserve

#endif  // LINSERVE_MODEL_BACKEND_STATE_PRECISION_H_
