// Host-side launchers for Mamba-2's SSD layer (the kind mamba2, model/layers/mamba2.h) after its
// in_proj and its convolution on x | B | C: the scan, per token and head dt = clamp(softplus(dt_raw
// + dt_bias), lo, hi), S ← exp(max(−exp(A_log)·dt, min_log_decay)) S + B (dt x)ᵀ, y = Sᵀ C +
// D ⊙ x into fp32 rows; then the grouped gated RMSNorm of y with z, written in T as out_proj's
// input. A scan block owns one head of one session (a decode row, or a prefill piece whose tokens
// it runs in order), one thread per column of S; every product and sum of the update rounds as
// the CPU's decode step (kernels/cpu/gated_linear_attention.h's step with one gate for every
// channel) in the same order, except expf and the softplus (log by Goldberg's identity). Prefill
// runs that step token by token, not the CPU's chunked form.
//
// State layout (the same as StateBlob and the CPU backend): per head S (state_size × head_dim
// elements of state_dtype, row-major) at state + slot · slot_stride + layer_offset. With a bf16
// state (--state_precision=bf16) each element is widened on load, updated in fp32 and rounded to
// nearest even on store, once per token (prefill too: it runs the scan per token).
#ifndef LINSERVE_KERNELS_CUDA_MAMBA2_H_
#define LINSERVE_KERNELS_CUDA_MAMBA2_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

struct Mamba2Shape {
  int heads = 0;
  int head_dim = 0;    // P
  int state_size = 0;  // N
  int groups = 0;      // sharing B and C; divides heads
  bool d_has_hdim = false;
  bool rmsnorm = true;
  bool norm_before_gate = false;
  float dt_min = 0, dt_max = 0;
  float min_log_decay = 0;  // a log decay below it (or NaN) is taken as it
  float norm_eps = 0;
  const float* dt_bias = nullptr;  // [heads]
  const float* a_log = nullptr;    // [heads]
  const float* d = nullptr;        // [heads], or [heads·head_dim] with d_has_hdim
  const float* norm = nullptr;     // [heads·head_dim] with rmsnorm
  const float* in_bias = nullptr;  // optional: in_proj's bias (z | xBC | dt)
};

// The most head_dim, state_size and heads the kernels take (the kind's limits).
constexpr int kMaxMamba2Dim = 1024;

// INVALID_ARGUMENT unless the dims are in [1, kMaxMamba2Dim], groups divides heads, the vectors
// are given (norm with rmsnorm) and dt_min ≤ dt_max. The launchers also refuse a state_dtype other
// than kF32 or kBf16.
absl::Status CheckMamba2Shape(const Mamba2Shape& shape);

struct Mamba2Rows {
  Mamba2Shape shape;
  // [rows, in_stride]: in_proj's rows without its bias, z | xBC | dt.
  const float* in = nullptr;
  int64_t in_stride = 0;
  // [rows, d_inner + 2·groups·state_size]: x | B | C after the convolution.
  const float* xbc = nullptr;
  void* state = nullptr;            // elements of state_dtype
  DType state_dtype = DType::kF32;  // kF32 or kBf16
  int64_t slot_stride = 0;          // elements per slot
  int64_t layer_offset = 0;         // elements from a slot's start to this layer's S
  float* y = nullptr;        // fp32 [rows, d_inner]: the scan's output
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, d_inner]: the norm's output, out_proj's input
};

// The scan, one token per row, each of a distinct slot (a negative slot is padding: zero state,
// no write), then the norm.
absl::Status LaunchDecodeMamba2(cudaStream_t stream, const Mamba2Rows& args, const int32_t* slots,
                                int rows);

// The scan of every piece of a prefill pass (device tables), its tokens in order, then the norm.
absl::Status LaunchPrefillMamba2(cudaStream_t stream, const Mamba2Rows& args,
                                 const PrefillTables& tables);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_MAMBA2_H_
