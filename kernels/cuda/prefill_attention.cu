// Chunked-parallel causal linear attention for prefill (one session, `tokens` consecutive rows).
// Feeding a prompt token by token would serialise it; the chunked form instead splits it into
// chunks of C tokens and, per chunk c and head,
//   o_i = (φq_i·S_c + Σ_{j<=i in c} (φq_i·φk_j) v_j) / (φq_i·z_c + Σ_{j<=i} φq_i·φk_j + eps)
// where S_c, z_c are the state before the chunk. It runs as four launches, each parallel over
// (head, chunk), so that a 32k-token prompt fills the GPU instead of 12 blocks walking it:
//   1. φ(q), φ(k) for every row (feature_map.cu);
//   2. per chunk, its own contribution ΔS_c = Σ φk_i v_iᵀ and Δz_c = Σ φk_i;
//   3. an exclusive scan over chunks, seeded with the slot's state, turning the Δs into the state
//      before each chunk and writing the final state back to the slot (one thread per state
//      element, sequential over chunks, so the order of additions is that of the recurrence);
//   4. per chunk, the intra-chunk scores tril(φQ φKᵀ) in shared memory (φ tiles staged through
//      shared memory 32 features at a time), then every output row.
// The state it leaves equals the token-by-token recurrence up to fp32 rounding.
// Work per chunk of C tokens and head: C·F·Dh multiply-adds for ΔS and as many for φq·S_c,
// C²·F/2 for the scores and C²·Dh/2 for their product with V, so ~2·F·Dh + C·(F + Dh)/2 per
// token; with Taylor's F = 273 (d_f 16) the first term dominates, as in the recurrence itself.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear_attention.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kFeatureTile = 32;

struct PrefillGeometry {
  int heads, dh, features, chunk, chunks, tokens;
  int64_t hd;           // heads · dh
  int64_t columns;      // of a fused q/k/v row: QkvColumns(shape)
  int64_t head_state;   // features · (dh + 1)
  int64_t layer_state;  // heads · head_state
};

__device__ __forceinline__ float ValueAt(const float* qkv, const float* qkv_bias,
                                         const PrefillGeometry& g, int64_t token, int head,
                                         int col) {
  const int64_t column = g.columns - g.hd + static_cast<int64_t>(head) * g.dh + col;
  float v = qkv[token * g.columns + column];
  if (qkv_bias != nullptr) v += qkv_bias[column];
  return v;
}

// Step 2: grid (heads, chunks). out[chunk][head] = (ΔS, Δz) in the state layout.
__global__ void __launch_bounds__(kThreads)
    ChunkSumKernel(PrefillGeometry g, const float* qkv, const float* qkv_bias, const float* phi_k,
                   float* chunk_states) {
  const int head = blockIdx.x;
  const int chunk = blockIdx.y;
  const int t0 = chunk * g.chunk;
  const int len = min(g.chunk, g.tokens - t0);
  float* out = chunk_states + chunk * g.layer_state + head * g.head_state;
  const int64_t cells = static_cast<int64_t>(g.features) * g.dh;
  for (int64_t e = threadIdx.x; e < cells; e += blockDim.x) {
    const int f = static_cast<int>(e / g.dh);
    const int col = static_cast<int>(e % g.dh);
    float acc = 0.0f;
    for (int i = 0; i < len; ++i) {
      const int64_t t = t0 + i;
      acc += phi_k[(t * g.heads + head) * g.features + f] * ValueAt(qkv, qkv_bias, g, t, head, col);
    }
    out[e] = acc;
  }
  for (int f = threadIdx.x; f < g.features; f += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < len; ++i) {
      acc += phi_k[((static_cast<int64_t>(t0) + i) * g.heads + head) * g.features + f];
    }
    out[cells + f] = acc;
  }
}

// Step 3: one thread per element of the layer's state (fp32 or bf16: carried in fp32, rounded
// once when stored).
template <typename S>
__global__ void ChunkScanKernel(PrefillGeometry g, float* chunk_states, S* state) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.layer_state) return;
  float running = ToFloat(state[e]);
  for (int c = 0; c < g.chunks; ++c) {
    float* cell = chunk_states + c * g.layer_state + e;
    const float delta = *cell;
    *cell = running;
    running += delta;
  }
  state[e] = FromFloat<S>(running);
}

// Step 4: grid (heads, chunks). Dynamic shared memory: scores [chunk²], den [chunk],
// φq and φk tiles [chunk × (kFeatureTile + 1)] each (padded against bank conflicts).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    ChunkOutputKernel(PrefillGeometry g, float eps, const float* qkv, const float* qkv_bias,
                      const float* phi_q, const float* phi_k, const float* chunk_states, T* out) {
  extern __shared__ float smem[];
  const int head = blockIdx.x;
  const int chunk = blockIdx.y;
  const int t0 = chunk * g.chunk;
  const int len = min(g.chunk, g.tokens - t0);
  constexpr int kTileStride = kFeatureTile + 1;
  float* scores = smem;                     // [len][len], row i = query
  float* den = scores + g.chunk * g.chunk;  // [len]
  float* q_tile = den + g.chunk;            // [len][kTileStride]
  float* k_tile = q_tile + g.chunk * kTileStride;
  const float* s_prev = chunk_states + chunk * g.layer_state + head * g.head_state;
  const float* z_prev = s_prev + static_cast<int64_t>(g.features) * g.dh;
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
    for (int f = 0; f < g.features; ++f) d += phi_q[phi_index(i, f)] * z_prev[f];
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

}  // namespace

absl::Status LaunchPrefillAttention(cudaStream_t stream, const PrefillAttentionArgs& args) {
  const AttentionShape& shape = args.shape;
  if (absl::Status status = CheckAttentionShape(shape); !status.ok()) return status;
  if (args.chunk < 1 || args.chunk > kMaxPrefillChunk) {
    return absl::InvalidArgumentError(absl::StrCat("prefill attention: chunk ", args.chunk,
                                                   " outside [1, ", kMaxPrefillChunk, "]"));
  }
  if (args.state_dtype != DType::kF32 && args.state_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefill attention: state_dtype ", DTypeName(args.state_dtype), " is not fp32 or bf16"));
  }
  if (args.tokens <= 0) return absl::OkStatus();

  PrefillGeometry g;
  g.heads = shape.heads;
  g.dh = shape.head_dim;
  g.features = shape.feature_dim;
  g.chunk = args.chunk;
  g.tokens = args.tokens;
  g.chunks = (args.tokens + args.chunk - 1) / args.chunk;
  g.hd = static_cast<int64_t>(g.heads) * g.dh;
  g.columns = QkvColumns(shape);
  g.head_state = static_cast<int64_t>(g.features) * (g.dh + 1);
  g.layer_state = g.heads * g.head_state;

  float* phi_q = args.scratch;
  float* phi_k = phi_q + static_cast<int64_t>(args.tokens) * g.heads * g.features;
  float* chunk_states = phi_k + static_cast<int64_t>(args.tokens) * g.heads * g.features;

  if (absl::Status status =
          LaunchFeatureMaps(stream, shape, args.qkv, args.qkv_bias, args.tokens, phi_q, phi_k);
      !status.ok()) {
    return status;
  }
  const dim3 grid(g.heads, g.chunks);
  ChunkSumKernel<<<grid, kThreads, 0, stream>>>(g, args.qkv, args.qkv_bias, phi_k, chunk_states);
  LINSERVE_CUDA_RETURN_IF_LAUNCH_FAILED("ChunkSumKernel");
  const int64_t scan_blocks = (g.layer_state + kThreads - 1) / kThreads;
  if (args.state_dtype == DType::kBf16) {
    ChunkScanKernel<<<static_cast<unsigned>(scan_blocks), kThreads, 0, stream>>>(
        g, chunk_states, static_cast<__nv_bfloat16*>(args.state));
  } else {
    ChunkScanKernel<<<static_cast<unsigned>(scan_blocks), kThreads, 0, stream>>>(
        g, chunk_states, static_cast<float*>(args.state));
  }
  LINSERVE_CUDA_RETURN_IF_LAUNCH_FAILED("ChunkScanKernel");

  const size_t smem = sizeof(float) * (static_cast<size_t>(g.chunk) * g.chunk + g.chunk +
                                       2 * static_cast<size_t>(g.chunk) * (kFeatureTile + 1));
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    if (smem > 48 * 1024) {
      LINSERVE_CUDA_RETURN_IF_ERROR(
          cudaFuncSetAttribute(ChunkOutputKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)));
    }
    ChunkOutputKernel<T><<<grid, kThreads, smem, stream>>>(g, shape.eps, args.qkv, args.qkv_bias,
                                                           phi_q, phi_k, chunk_states,
                                                           static_cast<T*>(args.out));
    return LaunchStatus("ChunkOutputKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
