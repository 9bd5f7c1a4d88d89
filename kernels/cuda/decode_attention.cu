// The fused decode-attention step: one block per (head, batch row). A decode step is
// memory-bound on the recurrent state (feature_dim × (head_dim + 1) fp32 per head and session,
// 2.4 MiB per session for the 125M shape against ~250 MB of bf16 weights shared by the whole
// batch), so this kernel exists to touch each S and z element exactly twice: one load and one
// store (with Based's Taylor map, F = 273 rows of S per head against q and k 16 wide, all the
// more so). q, k and v come straight from the fused QKV GEMM (bias added here), φ(q) and φ(k)
// are evaluated into shared memory, and then each thread walks one or four columns of S:
//   s = S[f, c] + φk[f]·v[c];  S[f, c] = s;  num_c += φq[f]·s
// with the block's threads split as (row group g, column vector c) so that a warp reads a
// contiguous segment of a row of S. Where the block's S (slot, layer and head offsets together)
// starts on a 4-element boundary and head_dim is a multiple of 4 (decided per block: every block
// of the plain maps' usual shapes; with Taylor's odd F, those whose offset happens to be), each
// thread owns 4 adjacent columns and
// moves them with one 16-byte (fp32) or 8-byte (bf16) load and store, 4 rows in flight, 64 B
// (fp32) per thread; other heads take the same path one column at a time, 8 rows in flight. The
// layout of a head's S is the StateBlob's, row-major and contiguous, so a block streams one run
// of memory; it is left as it is because a state moves bitwise between backends and files.
// With a bf16 state (--state_precision=bf16) S and z are widened to fp32 on load, updated and
// summed in fp32, and rounded to nearest even on store, halving the traffic that dominates a
// large batch. z and the denominator φ(q)ᵀz' + eps are done in the same pass.
// The slot index comes from a device array, so the batch may be any set of sessions, and the
// whole step can be captured in a CUDA graph; negative slots are padding rows of a graph bucket
// (computed from a zero state, never written). It is read first, and each thread's first rows of
// S and its z are loaded before q, k, v and φ, which do not need them, so that the state's
// latency overlaps that prologue instead of following it (on an H200 this kernel took 6 µs a
// layer at batch 1, a chain of dependent loads, and ran at 64% of its state's floor at batch
// 256, bench/results/gpu.md; what the ordering gains is not yet measured).
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/feature_map.cuh"
#include "kernels/cuda/linear_attention.h"
#include "kernels/cuda/shared_memory.cuh"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxVec = 4;

// Four adjacent bf16 state elements, moved as one 8-byte access.
struct alignas(8) Bf16x4 {
  __nv_bfloat16 e[4];
};

template <int kVec>
__device__ __forceinline__ void LoadState(const float* p, float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x;
    x[1] = v.y;
    x[2] = v.z;
    x[3] = v.w;
  } else {
    x[0] = *p;
  }
}
template <int kVec>
__device__ __forceinline__ void LoadState(const __nv_bfloat16* p, float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    const Bf16x4 v = *reinterpret_cast<const Bf16x4*>(p);
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = ToFloat(v.e[j]);
  } else {
    x[0] = ToFloat(*p);
  }
}
template <int kVec>
__device__ __forceinline__ void StoreState(float* p, const float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    float4 v;
    v.x = x[0];
    v.y = x[1];
    v.z = x[2];
    v.w = x[3];
    *reinterpret_cast<float4*>(p) = v;
  } else {
    *p = x[0];
  }
}
template <int kVec>
__device__ __forceinline__ void StoreState(__nv_bfloat16* p, const float (&x)[kVec]) {
  if constexpr (kVec == 4) {
    Bf16x4 v;
#pragma unroll
    for (int j = 0; j < 4; ++j) v.e[j] = FromFloat<__nv_bfloat16>(x[j]);
    *reinterpret_cast<Bf16x4*>(p) = v;
  } else {
    *p = FromFloat<__nv_bfloat16>(x[0]);
  }
}

// Rows of S a thread has in flight at once with kVec columns.
template <int kVec>
constexpr int kUnrollOf = kVec == 4 ? 4 : 8;

// How the S pass splits a head's S among the block's threads: kVec adjacent columns per thread,
// `width` threads across a row's vectors and `groups` row groups.
template <int kVec>
struct Tiling {
  int vectors, width, groups, group, lane;
  __device__ explicit Tiling(int dh) {
    vectors = dh / kVec;
    width = vectors < 64 ? vectors : 64;
    groups = kThreads / width;
    group = threadIdx.x / width;
    lane = threadIdx.x % width;
  }
};

// The rows of S this thread reads first in the S pass (v0 = 0, f0 = its group; zeros where it
// reads none), loaded at the start of the kernel so that they are in flight while q, k, v and φ
// are worked out: the pass's first loads no longer wait for that prologue.
template <int kVec, typename S>
__device__ __forceinline__ void LoadFirstRows(const AttentionShape& shape, const S* s_state,
                                              float (&s)[kUnrollOf<kVec>][kVec]) {
  const Tiling<kVec> t(shape.head_dim);
  const int c = t.lane * kVec;
#pragma unroll
  for (int u = 0; u < kUnrollOf<kVec>; ++u) {
    const int f = t.group + u * t.groups;
    if (s_state != nullptr && t.group < t.groups && c < shape.head_dim && f < shape.feature_dim) {
      LoadState<kVec>(s_state + static_cast<int64_t>(f) * shape.head_dim + c, s[u]);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j) s[u][j] = 0.0f;
    }
  }
}

// The S pass of one (head, row): kVec adjacent columns per thread, its first rows `first`
// (LoadFirstRows'). `partial` holds kMaxVec × kThreads floats.
template <int kVec, typename T, typename S>
__device__ __forceinline__ void StreamState(const AttentionShape& shape, S* s_state,
                                            const float (&first)[kUnrollOf<kVec>][kVec],
                                            const float* xv, const float* phi_q, const float* phi_k,
                                            float den, float* partial, T* out) {
  constexpr int kUnroll = kUnrollOf<kVec>;
  const int dh = shape.head_dim;
  const int features = shape.feature_dim;
  const Tiling<kVec> t(dh);
  const int vectors = t.vectors, width = t.width, groups = t.groups, group = t.group;
  const int lane = t.lane;
  for (int v0 = 0; v0 < vectors; v0 += width) {
    const int c = (v0 + lane) * kVec;
    float num[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) num[j] = 0.0f;
    if (group < groups && c < dh) {
      float v[kVec];
#pragma unroll
      for (int j = 0; j < kVec; ++j) v[j] = xv[c + j];
      for (int f0 = group; f0 < features; f0 += kUnroll * groups) {
        float s[kUnroll][kVec];
        const bool prefetched = v0 == 0 && f0 == group;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int f = f0 + u * groups;
          if (prefetched) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) s[u][j] = first[u][j];
          } else if (s_state != nullptr && f < features) {
            LoadState<kVec>(s_state + static_cast<int64_t>(f) * dh + c, s[u]);
          } else {
#pragma unroll
            for (int j = 0; j < kVec; ++j) s[u][j] = 0.0f;
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int f = f0 + u * groups;
          if (f < features) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) {
              s[u][j] += phi_k[f] * v[j];
              num[j] += phi_q[f] * s[u][j];
            }
            if (s_state != nullptr) {
              StoreState<kVec>(s_state + static_cast<int64_t>(f) * dh + c, s[u]);
            }
          }
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) partial[j * kThreads + threadIdx.x] = num[j];
    __syncthreads();
    if (group == 0 && c < dh) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float total = 0.0f;
        for (int g = 0; g < groups; ++g) total += partial[j * kThreads + g * width + lane];
        out[c + j] = FromFloat<T>(total / den);
      }
    }
    __syncthreads();
  }
}

// One (head, row) of the step, with kVec columns per thread in the S pass: the state's first
// loads (LoadFirstRows and this thread's first z) go out before the q/k/v loads and φ, which do
// not need them, so that the prologue and the state's latency overlap.
template <int kVec, typename T, typename S>
__device__ __forceinline__ void Attend(const DecodeAttentionArgs& args, int head, int64_t row,
                                       S* s_state, float* smem, float* scratch) {
  const AttentionShape& shape = args.shape;
  const int dk = shape.key_dim;
  const int dh = shape.head_dim;
  const int features = shape.feature_dim;
  float* xq = smem;
  float* xk = xq + dk;
  float* xv = xk + dk;
  float* phi_q = xv + dh;
  float* phi_k = phi_q + features;
  float* partial = phi_k + features;  // [kMaxVec × kThreads]
  S* z_state = s_state == nullptr ? nullptr : s_state + static_cast<int64_t>(features) * dh;

  float first[kUnrollOf<kVec>][kVec];
  LoadFirstRows<kVec>(shape, s_state, first);
  const bool has_z = z_state != nullptr && static_cast<int>(threadIdx.x) < features;
  const float z_first = has_z ? ToFloat(z_state[threadIdx.x]) : 0.0f;

  LoadHeadQkv(shape, args.qkv, args.qkv_bias, row, head, xq, xk, xv);
  BlockFeatureMap(shape, xq, phi_q, scratch);
  BlockFeatureMap(shape, xk, phi_k, scratch);

  float den_part = 0.0f;
  for (int f = threadIdx.x; f < features; f += blockDim.x) {
    float z = phi_k[f];
    if (z_state != nullptr) {
      z += f == static_cast<int>(threadIdx.x) ? z_first : ToFloat(z_state[f]);
      z_state[f] = FromFloat<S>(z);
    }
    den_part += phi_q[f] * z;
  }
  const float den = BlockSum(den_part, scratch) + shape.eps;

  T* out = static_cast<T*>(args.out) + row * shape.heads * dh + static_cast<int64_t>(head) * dh;
  StreamState<kVec>(shape, s_state, first, xv, phi_q, phi_k, den, partial, out);
}

template <typename T, typename S>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(DecodeAttentionArgs args) {
  AfterPriorKernel();
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const AttentionShape& shape = args.shape;
  const int head = blockIdx.x;
  const int64_t row = blockIdx.y;
  const int dh = shape.head_dim;
  const int features = shape.feature_dim;

  const int slot = args.slots[row];
  S* s_state = nullptr;
  if (slot >= 0) {
    s_state = static_cast<S*>(args.state) + static_cast<int64_t>(slot) * args.slot_stride +
              args.layer_offset + static_cast<int64_t>(head) * features * (dh + 1);
  }
  // Every row of S starts on a kMaxVec-element boundary when the head's first one does.
  const bool vectorized =
      dh % kMaxVec == 0 &&
      reinterpret_cast<uintptr_t>(s_state) % (kMaxVec * sizeof(S)) == 0;  // null: padding row
  if (vectorized) {
    Attend<kMaxVec, T>(args, head, row, s_state, smem, scratch);
  } else {
    Attend<1, T>(args, head, row, s_state, smem, scratch);
  }
}

}  // namespace

absl::Status LaunchDecodeAttention(cudaStream_t stream, const DecodeAttentionArgs& args) {
  if (absl::Status status = CheckAttentionShape(args.shape); !status.ok()) return status;
  if (args.state_dtype != DType::kF32 && args.state_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode attention: state_dtype ", DTypeName(args.state_dtype),
                     " is not fp32 or bf16"));
  }
  if (args.rows <= 0) return absl::OkStatus();
  const size_t smem = sizeof(float) * (2 * static_cast<size_t>(args.shape.key_dim) +
                                       static_cast<size_t>(args.shape.head_dim) +
                                       2 * static_cast<size_t>(args.shape.feature_dim) +
                                       kMaxVec * kThreads);
  const dim3 grid(args.shape.heads, args.rows);
  // Each launch names its kernel (a profile's and the emulation's launch log's name).
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    if (args.state_dtype == DType::kBf16) {
      LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(DecodeAttentionKernel<T, __nv_bfloat16>, smem));
      LaunchDependent(DecodeAttentionKernel<T, __nv_bfloat16>, grid, kThreads, smem, stream, args);
    } else {
      LINSERVE_RETURN_IF_ERROR(AllowSharedBytes(DecodeAttentionKernel<T, float>, smem));
      LaunchDependent(DecodeAttentionKernel<T, float>, grid, kThreads, smem, stream, args);
    }
    return LaunchStatus("DecodeAttentionKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
