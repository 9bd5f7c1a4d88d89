// Host-side launchers for causal linear attention ("Transformers are RNNs"): the feature maps,
// the fused per-(session, head) decode update, and chunked prefill.
//
// State layout (the same as StateBlob and as the CPU backend): a slot is one contiguous run of
// fp32; within it, for each layer, for each head: S (feature_dim × head_dim, row-major) then z
// (feature_dim). Kernels address a head's state as
//   state + slot * slot_stride + layer_offset + head * feature_dim * (head_dim + 1).
// The q/k/v input is the fused projection's output: row r holds q (H·Dh) | k (H·Dh) | v (H·Dh),
// head h at columns h·Dh ..., without bias (added here).
#ifndef LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_
#define LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"

namespace linserve::cuda {

// φ: elu_plus_one elu(x)+1; relu max(x,0); exp exp(x − max_i x_i) per head vector;
// favor_plus exp(W x − ‖x‖²/2) / √m with W [feature_dim = m, head_dim].
enum class FeatureMapKind { kEluPlusOne, kRelu, kExp, kFavorPlus };

struct AttentionShape {
  int heads = 0;
  int head_dim = 0;
  int feature_dim = 0;
  FeatureMapKind feature_map = FeatureMapKind::kEluPlusOne;
  const float* favor = nullptr;  // [feature_dim, head_dim], favor_plus only (this layer's)
  float eps = 1e-6f;             // φ(q)ᵀS / (φ(q)ᵀz + eps)
};

// Largest feature_dim / head_dim the attention kernels accept (the shared-memory footprint).
constexpr int kMaxAttentionFeatureDim = 16384;
constexpr int kMaxAttentionHeadDim = 4096;

// INVALID_ARGUMENT unless 1 <= head_dim <= kMaxAttentionHeadDim, 1 <= feature_dim <=
// kMaxAttentionFeatureDim, heads >= 1 and favor_plus has its projection.
absl::Status CheckAttentionShape(const AttentionShape& shape);

// φ of q and k for `rows` token rows: phi_q/phi_k [rows, heads, feature_dim] fp32. Used by the
// prefill path and exposed for the kernel parity tests.
absl::Status LaunchFeatureMaps(cudaStream_t stream, const AttentionShape& shape, const float* qkv,
                               const float* qkv_bias, int rows, float* phi_q, float* phi_k);

struct DecodeAttentionArgs {
  AttentionShape shape;
  const float* qkv = nullptr;       // [rows, 3·H·Dh]
  const float* qkv_bias = nullptr;  // optional [3·H·Dh]
  const int32_t* slots = nullptr;   // [rows]; a negative slot is padding: zero state, no write
  float* state = nullptr;
  int64_t slot_stride = 0;   // floats per slot
  int64_t layer_offset = 0;  // floats from a slot's start to this layer's state
  int rows = 0;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, H·Dh]: concat_heads(o)
};
// One step per row: S += φ(k) vᵀ, z += φ(k), o = φ(q)ᵀS / (φ(q)ᵀz + eps), with S and z read
// once and written once. Rows must name distinct slots.
absl::Status LaunchDecodeAttention(cudaStream_t stream, const DecodeAttentionArgs& args);

struct PrefillAttentionArgs {
  AttentionShape shape;
  const float* qkv = nullptr;       // [tokens, 3·H·Dh], consecutive tokens of one session
  const float* qkv_bias = nullptr;  // optional [3·H·Dh]
  float* state = nullptr;  // this layer's state of the session's slot (H heads, S then z each)
  int tokens = 0;
  int chunk = 64;  // intra-chunk size, 1 ..= kMaxPrefillChunk
  // Scratch, sized by PrefillAttentionScratchFloats(shape, tokens, chunk).
  float* scratch = nullptr;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [tokens, H·Dh]
};
constexpr int kMaxPrefillChunk = 128;
int64_t PrefillAttentionScratchFloats(const AttentionShape& shape, int tokens, int chunk);
// Feeds `tokens` rows to the state in the chunked-parallel form: within a chunk the causal
// product tril(φ(Q)φ(K)ᵀ)V, across chunks the carried S and z. Leaves the state equal (up to
// fp32 rounding) to feeding the tokens one by one.
absl::Status LaunchPrefillAttention(cudaStream_t stream, const PrefillAttentionArgs& args);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_
