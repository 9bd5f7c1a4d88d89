// Host-side launchers for sliding-window softmax attention with rotary position embeddings (the
// "sliding_window_attention" mixer, model/layers/sliding_window_attention.h): the decode step
// over a batch of sessions and the prefill of one piece of consecutive tokens of one session.
//
// State layout (the same as StateBlob and as the CPU backend): this layer's slice of a slot is a
// ring of R = window − 1 entries, entry r holding for head h the key before RoPE [head_dim] and
// then the value [head_dim] at (r · heads + h) · 2 · head_dim, followed by count (entries holding
// a token, 0 … R) and next (the entry the next token goes to; 0 when R = 0) as floats.
// The q/k/v input is the fused projection's output: row r holds q (H·Dh) | k (H·Dh) | v (H·Dh),
// head h at columns h·Dh ..., without bias (added here).
//
// A score is q · RoPE_{−distance}(k) / √head_dim (GPT-NeoX rotation of the first rotary_dim
// dims), the cos and sin of distance · base^(−2i / rotary_dim) computed in double and rounded to
// fp32, as the CPU backend does: a table of them for distances 0 … window − 1, which depends on
// the shape alone, is filled once (LaunchSlidingWindowRotationTable) and read by every launch
// (`rotation`). The softmax over a query's window is taken
// in tiles of keys (online, max-subtracted, fp32), so any window up to 65536 runs in a fixed
// shared-memory footprint.
#ifndef LINSERVE_KERNELS_CUDA_SLIDING_WINDOW_ATTENTION_H_
#define LINSERVE_KERNELS_CUDA_SLIDING_WINDOW_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dtype.h"
#include "kernels/cuda/prefill_pieces.h"

namespace linserve::cuda {

struct SlidingWindowShape {
  int heads = 0;
  int head_dim = 0;
  int window = 0;      // tokens a query sees, itself included
  int rotary_dim = 0;  // even, <= head_dim
  double rope_base = 10000;
};

// Largest head_dim the kernels accept (the shared-memory footprint of q, the output accumulator
// and the rotary frequencies of one head).
constexpr int kMaxSlidingWindowHeadDim = 4096;

// INVALID_ARGUMENT unless heads >= 1, 1 <= head_dim <= kMaxSlidingWindowHeadDim, window >= 1 and
// rotary_dim is even and in [0, head_dim].
absl::Status CheckSlidingWindowShape(const SlidingWindowShape& shape);

// Floats of the rotation table: cos and sin, window × rotary_dim / 2 each.
int64_t SlidingWindowRotationFloats(const SlidingWindowShape& shape);

// Fills `table` (SlidingWindowRotationFloats(shape) floats; nothing to fill, and null allowed,
// when that is 0) for this shape, once: the decode and prefill launches read it.
absl::Status LaunchSlidingWindowRotationTable(cudaStream_t stream, const SlidingWindowShape& shape,
                                              float* table);

struct SlidingWindowDecodeArgs {
  SlidingWindowShape shape;
  const float* qkv = nullptr;       // [rows, 3·H·Dh]
  const float* qkv_bias = nullptr;  // optional [3·H·Dh]
  const int32_t* slots = nullptr;   // [rows]; a negative slot is padding: zero state, no write
  const float* rotation = nullptr;  // LaunchSlidingWindowRotationTable's for this shape
  float* state = nullptr;
  int64_t slot_stride = 0;   // floats per slot
  int64_t layer_offset = 0;  // floats from a slot's start to this layer's slice
  int rows = 0;
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [rows, H·Dh]: concat_heads(o)
};
// One token per row: attends over the slot's `count` stored tokens and the row's own, writes the
// row's k and v into entry `next`, then (a second launch) advances count and next. Rows must name
// distinct slots.
absl::Status LaunchSlidingWindowDecode(cudaStream_t stream, const SlidingWindowDecodeArgs& args);

struct SlidingWindowPrefillArgs {
  SlidingWindowShape shape;
  const float* qkv = nullptr;       // [tables.rows, 3·H·Dh]: the pass's rows
  const float* qkv_bias = nullptr;  // optional [3·H·Dh]
  PrefillTables tables;             // the pass's sessions (device tables; prefill_pieces.h)
  // The state pool: piece p's slice at tables.pieces[p].slot · slot_stride + layer_offset.
  float* state = nullptr;
  int64_t slot_stride = 0;
  int64_t layer_offset = 0;
  const float* rotation = nullptr;  // LaunchSlidingWindowRotationTable's for this shape
  DType out_dtype = DType::kF32;
  void* out = nullptr;  // T [tables.rows, H·Dh]
};
// Token i of a piece attends to the window − 1 tokens before it (the ring's newest, then the
// piece's earlier tokens) and itself; then, in later launches (after every read of the old
// rings), each ring takes its piece's last R tokens and count / next advance: each state is
// bitwise the one feeding its tokens one by one leaves. Launches per layer: three, whatever the
// pieces.
absl::Status LaunchSlidingWindowPrefill(cudaStream_t stream, const SlidingWindowPrefillArgs& args);

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_SLIDING_WINDOW_ATTENTION_H_
