// Host-side launchers for causal linear attention ("Transformers are RNNs", and Based's Taylor
// linear attention): the feature maps, the fused per-(session, head) decode update, and chunked
// prefill. Every feature map shares these kernels; a map only changes how φ is evaluated
// (feature_map.cuh), and q/k may be narrower or wider than v (key_dim vs head_dim).
//
// State layout (the same as StateBlob and as the CPU backend): a slot is one contiguous run of
// elements, fp32 or (--state_precision=bf16) bf16, read into fp32 and accumulated in fp32 in
// the kernels and rounded to nearest even when stored; within it, for each layer, for each
// head: S (feature_dim × head_dim, row-major) then z (feature_dim). Kernels address a head's
// state as
//   state + slot * slot_stride + layer_offset + head * feature_dim * (head_dim + 1).
// The q/k/v input is the fused projection's output: row r holds q (H·Dk) | k (H·Dk) | v (H·Dh)
// (Dk = key_dim, Dh = head_dim), head h at columns h·Dk ... of q and k and h·Dh ... of v, without
// bias (added here).
#ifndef LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_
#define LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

// φ of a head's q or k vector x (key_dim = d wide): elu_plus_one elu(x)+1; relu max(x,0); exp
// exp(x − max_i x_i); favor_plus exp(W x − ‖x‖²/2) / √m with W [feature_dim = m, d]; taylor
// [1, x/d^¼, vec(x xᵀ)/(√2·√d)] (vec row-major, feature_dim = 1 + d + d²).
enum class FeatureMapKind { kEluPlusOne, kRelu, kExp, kFavorPlus, kTaylor };

struct AttentionShape {
  int heads = 0;
  int key_dim = 0;      // Dk: the width of each head's q and k (φ's input)
  int head_dim = 0;     // Dh: the width of each head's v and output
  int feature_dim = 0;  // F: the width of φ, the rows of S
  FeatureMapKind feature_map = FeatureMapKind::kEluPlusOne;
  const float* favor = nullptr;  // [feature_dim, key_dim], favor_plus only (this layer's)
  float eps = 1e-6f;             // φ(q)ᵀS / (φ(q)ᵀz + eps)
};

// Columns of a fused q/k/v row: heads · (2 · key_dim + head_dim).
int64_t QkvColumns(const AttentionShape& shape);

// Largest feature_dim / key_dim and head_dim the attention kernels accept (the shared-memory
// footprint: the kernels hold q, k, v and φ(q), φ(k) of one head in shared memory, never S, which
// they stream from global memory).
constexpr int kMaxAttentionFeatureDim = 16384;
constexpr int kMaxAttentionHeadDim = 4096;

// INVALID_ARGUMENT unless heads >= 1, 1 <= key_dim, head_dim <= kMaxAttentionHeadDim, 1 <=
// feature_dim <= kMaxAttentionFeatureDim, feature_dim is what the map makes of key_dim
// (key_dim for the elementwise maps, 1 + key_dim + key_dim² for taylor) and favor_plus has its
// projection.
absl::Status CheckAttentionShape(const AttentionShape& shape);

// φ of q and k for `rows` token rows: phi_q/phi_k [rows, heads, feature_dim] fp32. Used by the
// prefill path and exposed for the kernel parity tests.
absl::Status LaunchFeatureMaps(cudaStream_t stream, const AttentionShape& shape, const float* qkv,
                               const float* qkv_bias, int rows, float* phi_q, float* phi_k);

struct DecodeAttentionArgs {
  AttentionShape shape;
  const float* qkv = nullptr;       // [rows, QkvColumns(shape)]
  const float* qkv_bias = nullptr;  // optional [QkvColumns(shape)]
  const int32_t* slots = nullptr;   // [rows]; a negative slot is padding: zero state, no write
  void* state = nullptr;                // elements of state_dtype
  DType state_dtype = DType::kF32;      // kF32 or kBf16
  int64_t slot_stride = 0;   // elements per slot
  int64_t layer_offset = 0;  // elements from a slot's start to this layer's state
  int rows = 0;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, H·Dh]: concat_heads(o)
};
// One step per row: S += φ(k) vᵀ, z += φ(k), o = φ(q)ᵀS / (φ(q)ᵀz + eps), with S and z read
// once and written once (o from the fp32 sums, before the store rounds them to state_dtype).
// Rows must name distinct slots. INVALID_ARGUMENT for a state_dtype other than kF32 or kBf16.
absl::Status LaunchDecodeAttention(cudaStream_t stream, const DecodeAttentionArgs& args);

struct PrefillAttentionArgs {
  AttentionShape shape;
  const float* qkv = nullptr;       // [tables.rows, QkvColumns(shape)]: the pass's rows
  const float* qkv_bias = nullptr;  // optional [QkvColumns(shape)]
  PrefillTables tables;             // the pass's sessions (device tables; prefill_pieces.h)
  // The state pool: piece p's layer state at element tables.pieces[p].slot · slot_stride +
  // layer_offset (H heads, S then z each).
  void* state = nullptr;
  DType state_dtype = DType::kF32;  // kF32 or kBf16
  int64_t slot_stride = 0;
  int64_t layer_offset = 0;
  // Scratch, sized by PrefillAttentionScratchFloats(shape, tables.rows, tables.chunk).
  float* scratch = nullptr;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [tables.rows, H·Dh]
};
constexpr int kMaxPrefillChunk = 128;  // tables.chunk: 1 ..= kMaxPrefillChunk
// φ(q) and φ(k) of every row, and the carries (at most rows / chunk states).
int64_t PrefillAttentionScratchFloats(const AttentionShape& shape, int rows, int chunk);
// Feeds every piece's rows to its slot's state in the chunked-parallel form: within a chunk the
// causal product tril(φ(Q)φ(K)ᵀ)V, across a piece's chunks the carried S and z; five launches
// whatever the pieces. Leaves each state equal (up to fp32 rounding) to feeding its tokens one
// by one, and bitwise equal to the same call with that piece alone.
absl::Status LaunchPrefillAttention(cudaStream_t stream, const PrefillAttentionArgs& args);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_LINEAR_ATTENTION_H_
