// Chunked-parallel causal linear attention for prefill, varlen: every session (piece) of a pass
// in the same launches (prefill_pieces.h). Feeding a prompt token by token would serialise it;
// the chunked form instead splits it into chunks of C tokens and, per chunk c and head,
//   o_i = (φq_i·S_c + Σ_{j<=i in c} (φq_i·φk_j) v_j) / (φq_i·z_c + Σ_{j<=i} φq_i·φk_j + eps)
// where S_c, z_c are the state before the chunk. It runs as five launches per layer whatever the
// number of sessions, each parallel over (head, chunk) or (head, session), so that a 32k-token
// prompt, or 256 short ones, fill the GPU instead of 12 blocks walking each:
//   1. φ(q), φ(k) for every row of the pass (feature_map.cu);
//   2. per chunk that is not its session's last, its own contribution ΔS_c = Σ φk_i v_iᵀ and
//      Δz_c = Σ φk_i, into the chunk's carry;
//   3. per session, an inclusive scan over those chunks seeded with the slot's state, turning
//      each carry into the state after its chunk (one thread per state element, sequential
//      over chunks, so the order of additions is that of the recurrence);
//   4. per chunk, the intra-chunk scores tril(φQ φKᵀ) in shared memory (φ tiles staged through
//      shared memory 32 features at a time), then every output row, from the state before the
//      chunk (the slot's for a session's first chunk, else the carry before it);
//   5. per session, its last chunk's contribution added to the state before it, written to the
//      slot (after step 4 has read the slot's state).
// A session's chunks and sums are those of the session alone, in the same order: the state and
// outputs are bitwise one launch sequence per session's, and equal the token-by-token
// recurrence up to fp32 rounding. The carries take at most rows / C states (prefill_pieces.h).
// Work per chunk of C tokens and head: C·F·Dh multiply-adds for ΔS and as many for φq·S_c,
// C²·F/2 for the scores and C²·Dh/2 for their product with V, so ~2·F·Dh + C·(F + Dh)/2 per
// token; with Taylor's F = 273 (d_f 16) the first term dominates, as in the recurrence itself.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/shared_memory.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kFeatureTile = 32;

struct PrefillGeometry {
  int heads, dh, features, chunk;
  int64_t hd;           // heads · dh
  int64_t columns;      // of a fused q/k/v row: QkvColumns(shape)
  int64_t head_state;   // features · (dh + 1)
  int64_t layer_state;  // heads · head_state
  int64_t slot_stride;  // state elements per slot
  int64_t layer_offset;
};

__device__ __forceinline__ float ValueAt(const float* qkv, const float* qkv_bias,
                                         const PrefillGeometry& g, int64_t token, int head,
                                         int col) {
  const int64_t column = g.columns - g.hd + static_cast<int64_t>(head) * g.dh + col;
  float v = qkv[token * g.columns + column];
  if (qkv_bias != nullptr) v += qkv_bias[column];
  return v;
}

// The layer's state of a piece's slot.
template <typename S>
__device__ __forceinline__ S* LayerState(S* state, const PrefillGeometry& g, int32_t slot) {
  return state + static_cast<int64_t>(slot) * g.slot_stride + g.layer_offset;
}

// Element e of a head's state (S then z) summed over a chunk's rows: ΔS or Δz.
__device__ __forceinline__ float ChunkDelta(const PrefillGeometry& g, const PrefillChunk& c,
                                            int head, int64_t e, const float* qkv,
                                            const float* qkv_bias, const float* phi_k) {
  const int64_t cells = static_cast<int64_t>(g.features) * g.dh;
  float acc = 0.0f;
  if (e < cells) {
    const int f = static_cast<int>(e / g.dh);
    const int col = static_cast<int>(e % g.dh);
    for (int i = 0; i < c.rows; ++i) {
      const int64_t t = c.first_row + i;
      acc += phi_k[(t * g.heads + head) * g.features + f] * ValueAt(qkv, qkv_bias, g, t, head, col);
    }
  } else {
    const int f = static_cast<int>(e - cells);
    for (int i = 0; i < c.rows; ++i) {
      acc += phi_k[((static_cast<int64_t>(c.first_row) + i) * g.heads + head) * g.features + f];
    }
  }
  return acc;
}

// Step 2: grid (heads, chunks). The carry of each chunk that has one = (ΔS, Δz) of its head, in
// the state layout.
__global__ void __launch_bounds__(kThreads)
    ChunkSumKernel(PrefillGeometry g, PrefillTables tables, const float* qkv,
                   const float* qkv_bias, const float* phi_k, float* carries) {
  AfterPriorKernel();
  const int head = blockIdx.x;
  const PrefillChunk c = tables.chunks[blockIdx.y];
  if (c.carry_out < 0) return;  // a piece's last chunk: step 5
  float* out = carries + c.carry_out * g.layer_state + head * g.head_state;
  for (int64_t e = threadIdx.x; e < g.head_state; e += blockDim.x) {
    out[e] = ChunkDelta(g, c, head, e, qkv, qkv_bias, phi_k);
  }
}

// Step 3: grid (element blocks, pieces), one thread per element of the layer's state (fp32 or
// bf16: carried in fp32).
template <typename S>
__global__ void ChunkScanKernel(PrefillGeometry g, PrefillTables tables, float* carries,
                                const S* state) {
  AfterPriorKernel();
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const PrefillPiece p = tables.pieces[blockIdx.y];
  if (e >= g.layer_state || p.chunks < 2) return;
  const int32_t first = tables.chunks[p.first_chunk].carry_out;
  float running = ToFloat(LayerState(state, g, p.slot)[e]);
  for (int c = 0; c + 1 < p.chunks; ++c) {
    float* cell = carries + (first + c) * g.layer_state + e;
    running += *cell;
    *cell = running;
  }
}

// The state before chunk `c` of head `head`: the slot's, or the carry of the chunk before.
template <typename S>
struct StateBefore {
  const S* slot_state;  // this head's, in the slot (a piece's first chunk)
  const float* carry;   // this head's, in the carries (the other chunks)
  __device__ __forceinline__ float operator[](int64_t i) const {
    return carry != nullptr ? carry[i] : ToFloat(slot_state[i]);
  }
};

template <typename S>
__device__ __forceinline__ StateBefore<S> Before(const PrefillGeometry& g, const PrefillTables& t,
                                                 const PrefillChunk& c, int head, const S* state,
                                                 const float* carries) {
  StateBefore<S> before{nullptr, nullptr};
  if (c.carry_in < 0) {
    before.slot_state = LayerState(state, g, t.pieces[c.piece].slot) + head * g.head_state;
  } else {
    before.carry = carries + c.carry_in * g.layer_state + head * g.head_state;
  }
  return before;
}

// Step 4: grid (heads, chunks). Dynamic shared memory: scores [chunk²], den [chunk],
// φq and φk tiles [chunk × (kFeatureTile + 1)] each (padded against bank conflicts).
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads)
    ChunkOutputKernel(PrefillGeometry g, PrefillTables tables, float eps, const float* qkv,
                      const float* qkv_bias, const float* phi_q, const float* phi_k,
                      const float* carries, const S* state, T* out) {
  AfterPriorKernel();
  extern __shared__ float smem[];
  const int head = blockIdx.x;
  const PrefillChunk c = tables.chunks[blockIdx.y];
  const int t0 = c.first_row;
  const int len = c.rows;
  constexpr int kTileStride = kFeatureTile + 1;
  float* scores = smem;                     // [len][len], row i = query
  float* den = scores + g.chunk * g.chunk;  // [len]
  float* q_tile = den + g.chunk;            // [len][kTileStride]
  float* k_tile = q_tile + g.chunk * kTileStride;
  const StateBefore<S> s_prev = Before(g, tables, c, head, state, carries);
  const int64_t z_at = static_cast<int64_t>(g.features) * g.dh;
  auto phi_index = [&](int i, int f) {
    return ((static_cast<int64_t>(t0) + i) * g.heads + head) * g.features + f;
  };

  for (int p = threadIdx.x; p < len * len; p += blockDim.x) scores[p] = 0.0f;
  for (int f0 = 0; f0 < g.features; f0 += kFeatureTile) {
    const int width = min(kFeatureTile, g.features - f0);
    __syncthreads();  // the previous tile has been consumed (and scores zeroed)
    for (int p = threadIdx.x; p < len * kFeatureTile; p += blockDim.x) {
      const int i = p / kFeatureTile;
      const int ff = p % kFeatureTile;
      q_tile[i * kTileStride + ff] = ff < width ? phi_q[phi_index(i, f0 + ff)] : 0.0f;
      k_tile[i * kTileStride + ff] = ff < width ? phi_k[phi_index(i, f0 + ff)] : 0.0f;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < len * len; p += blockDim.x) {
      const int i = p / len;
      const int j = p % len;
      if (j <= i) {
        float acc = scores[p];
        for (int ff = 0; ff < width; ++ff) {
          acc += q_tile[i * kTileStride + ff] * k_tile[j * kTileStride + ff];
        }
        scores[p] = acc;
      }
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    float d = 0.0f;
    for (int f = 0; f < g.features; ++f) d += phi_q[phi_index(i, f)] * s_prev[z_at + f];
    for (int j = 0; j <= i; ++j) d += scores[i * len + j];
    den[i] = d + eps;
  }
  __syncthreads();

  for (int p = threadIdx.x; p < len * g.dh; p += blockDim.x) {
    const int i = p / g.dh;
    const int col = p % g.dh;
    float acc = 0.0f;
    for (int f = 0; f < g.features; ++f) {
      acc += phi_q[phi_index(i, f)] * s_prev[static_cast<int64_t>(f) * g.dh + col];
    }
    for (int j = 0; j <= i; ++j) {
      acc += scores[i * len + j] * ValueAt(qkv, qkv_bias, g, t0 + j, head, col);
    }
    out[(static_cast<int64_t>(t0) + i) * g.hd + static_cast<int64_t>(head) * g.dh + col] =
        FromFloat<T>(acc / den[i]);
  }
}

// Step 5: grid (heads, pieces). The slot's state = the state before the piece's last chunk + that
// chunk's contribution, rounded once when stored.
template <typename S>
__global__ void __launch_bounds__(kThreads)
    ChunkFinalKernel(PrefillGeometry g, PrefillTables tables, const float* qkv,
                     const float* qkv_bias, const float* phi_k, const float* carries, S* state) {
  AfterPriorKernel();
  const int head = blockIdx.x;
  const PrefillPiece p = tables.pieces[blockIdx.y];
  const PrefillChunk c = tables.chunks[p.first_chunk + p.chunks - 1];
  const StateBefore<S> before = Before<S>(g, tables, c, head, state, carries);
  S* out = LayerState(state, g, p.slot) + head * g.head_state;
  for (int64_t e = threadIdx.x; e < g.head_state; e += blockDim.x) {
    float running = before[e];
    running += ChunkDelta(g, c, head, e, qkv, qkv_bias, phi_k);
    out[e] = FromFloat<S>(running);
  }
}

template <typename S>
absl::Status LaunchChunks(cudaStream_t stream, const PrefillAttentionArgs& args,
                          const PrefillGeometry& g, const float* phi_q, const float* phi_k,
                          float* carries) {
  const PrefillTables& t = args.tables;
  S* state = static_cast<S*>(args.state);
  const dim3 chunk_grid(g.heads, t.chunk_count);
  const dim3 piece_grid(g.heads, t.piece_count);
  if (t.carries > 0) {
    LaunchDependent(ChunkSumKernel, chunk_grid, kThreads, 0, stream, g, t, args.qkv, args.qkv_bias,
                    phi_k, carries);
    LINSERVE_CUDA_RETURN_IF_LAUNCH_FAILED("ChunkSumKernel");
    const int64_t scan_blocks = (g.layer_state + kThreads - 1) / kThreads;
    LaunchDependent(ChunkScanKernel<S>, dim3(static_cast<unsigned>(scan_blocks), t.piece_count),
                    kThreads, 0, stream, g, t, carries, state);
    LINSERVE_CUDA_RETURN_IF_LAUNCH_FAILED("ChunkScanKernel");
  }
  const size_t smem = sizeof(float) * (static_cast<size_t>(g.chunk) * g.chunk + g.chunk +
                                       2 * static_cast<size_t>(g.chunk) * (kFeatureTile + 1));
  LINSERVE_RETURN_IF_ERROR(LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(ChunkOutputKernel<T, S>, smem));
    LaunchDependent(ChunkOutputKernel<T, S>, chunk_grid, kThreads, smem, stream, g, t,
                    args.shape.eps, args.qkv, args.qkv_bias, phi_q, phi_k, carries, state,
                    static_cast<T*>(args.out));
    return LaunchStatus("ChunkOutputKernel", __FILE__, __LINE__);
  }));
  LaunchDependent(ChunkFinalKernel<S>, piece_grid, kThreads, 0, stream, g, t, args.qkv,
                  args.qkv_bias, phi_k, carries, state);
  return LaunchStatus("ChunkFinalKernel", __FILE__, __LINE__);
}

}  // namespace

absl::Status LaunchPrefillAttention(cudaStream_t stream, const PrefillAttentionArgs& args) {
  const AttentionShape& shape = args.shape;
  const PrefillTables& t = args.tables;
  if (absl::Status status = CheckAttentionShape(shape); !status.ok()) return status;
  if (t.chunk < 1 || t.chunk > kMaxPrefillChunk) {
    return absl::InvalidArgumentError(absl::StrCat("prefill attention: chunk ", t.chunk,
                                                   " outside [1, ", kMaxPrefillChunk, "]"));
  }
  if (args.state_dtype != DType::kF32 && args.state_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefill attention: state_dtype ", DTypeName(args.state_dtype), " is not fp32 or bf16"));
  }
  if (t.rows <= 0 || t.piece_count <= 0) return absl::OkStatus();

  PrefillGeometry g;
  g.heads = shape.heads;
  g.dh = shape.head_dim;
  g.features = shape.feature_dim;
  g.chunk = t.chunk;
  g.hd = static_cast<int64_t>(g.heads) * g.dh;
  g.columns = QkvColumns(shape);
  g.head_state = static_cast<int64_t>(g.features) * (g.dh + 1);
  g.layer_state = g.heads * g.head_state;
  g.slot_stride = args.slot_stride;
  g.layer_offset = args.layer_offset;

  float* phi_q = args.scratch;
  float* phi_k = phi_q + static_cast<int64_t>(t.rows) * g.heads * g.features;
  float* carries = phi_k + static_cast<int64_t>(t.rows) * g.heads * g.features;

  if (absl::Status status =
          LaunchFeatureMaps(stream, shape, args.qkv, args.qkv_bias, t.rows, phi_q, phi_k);
      !status.ok()) {
    return status;
  }
  if (args.state_dtype == DType::kBf16) {
    return LaunchChunks<__nv_bfloat16>(stream, args, g, phi_q, phi_k, carries);
  }
  return LaunchChunks<float>(stream, args, g, phi_q, phi_k, carries);
}

}  // namespace linserve::cuda
