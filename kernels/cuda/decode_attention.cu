// The fused decode-attention step: one block per (head, batch row). A decode step is
// memory-bound on the recurrent state (feature_dim × (head_dim + 1) fp32 per head and session,
// 2.4 MiB per session for the 125M shape against ~250 MB of bf16 weights shared by the whole
// batch), so this kernel exists to touch each S and z element exactly twice: one load and one
// store (with Based's Taylor map, F = 273 rows of S per head against q and k 16 wide, all the
// more so). q, k and v come straight from the fused QKV GEMM (bias added here), φ(q) and φ(k)
// are evaluated into shared memory, and then each thread walks a column of S:
//   s = S[f, c] + φk[f]·v[c];  S[f, c] = s;  num_c += φq[f]·s
// with the block's threads split as (row group g, column c) so that a warp reads a contiguous
// 128-256 B segment of a row of S; eight independent rows are loaded before use to keep enough
// requests in flight. z and the denominator φ(q)ᵀz' + eps are done in the same pass.
// The slot index comes from a device array, so the batch may be any set of sessions, and the
// whole step can be captured in a CUDA graph; negative slots are padding rows of a graph bucket
// (computed from a zero state, never written).
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/feature_map.cuh"
#include "kernels/cuda/linear_attention.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 8;

template <typename T>
__global__ void __launch_bounds__(kThreads) DecodeAttentionKernel(DecodeAttentionArgs args) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const AttentionShape& shape = args.shape;
  const int head = blockIdx.x;
  const int64_t row = blockIdx.y;
  const int dk = shape.key_dim;
  const int dh = shape.head_dim;
  const int features = shape.feature_dim;
  float* xq = smem;
  float* xk = xq + dk;
  float* xv = xk + dk;
  float* phi_q = xv + dh;
  float* phi_k = phi_q + features;
  float* partial = phi_k + features;  // [kThreads]

  LoadHeadQkv(shape, args.qkv, args.qkv_bias, row, head, xq, xk, xv);
  BlockFeatureMap(shape, xq, phi_q, scratch);
  BlockFeatureMap(shape, xk, phi_k, scratch);

  const int slot = args.slots[row];
  float* s_state = nullptr;
  if (slot >= 0) {
    s_state = args.state + static_cast<int64_t>(slot) * args.slot_stride + args.layer_offset +
              static_cast<int64_t>(head) * features * (dh + 1);
  }
  float* z_state = s_state == nullptr ? nullptr : s_state + static_cast<int64_t>(features) * dh;

  float den_part = 0.0f;
  for (int f = threadIdx.x; f < features; f += blockDim.x) {
    const float z = (z_state != nullptr ? z_state[f] : 0.0f) + phi_k[f];
    if (z_state != nullptr) z_state[f] = z;
    den_part += phi_q[f] * z;
  }
  const float den = BlockSum(den_part, scratch) + shape.eps;

  const int width = dh < 64 ? dh : 64;
  const int groups = kThreads / width;
  const int group = threadIdx.x / width;
  const int lane = threadIdx.x % width;
  T* out = static_cast<T*>(args.out) + row * shape.heads * dh + static_cast<int64_t>(head) * dh;
  for (int c0 = 0; c0 < dh; c0 += width) {
    const int c = c0 + lane;
    float num = 0.0f;
    if (group < groups && c < dh) {
      const float v = xv[c];
      for (int f0 = group; f0 < features; f0 += kUnroll * groups) {
        float s[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int f = f0 + u * groups;
          s[u] = (s_state != nullptr && f < features) ? s_state[static_cast<int64_t>(f) * dh + c]
                                                      : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int f = f0 + u * groups;
          if (f < features) {
            s[u] += phi_k[f] * v;
            if (s_state != nullptr) s_state[static_cast<int64_t>(f) * dh + c] = s[u];
            num += phi_q[f] * s[u];
          }
        }
      }
    }
    partial[threadIdx.x] = num;
    __syncthreads();
    if (group == 0 && c < dh) {
      float total = 0.0f;
      for (int g = 0; g < groups; ++g) total += partial[g * width + lane];
      out[c] = FromFloat<T>(total / den);
    }
    __syncthreads();
  }
}

}  // namespace

absl::Status LaunchDecodeAttention(cudaStream_t stream, const DecodeAttentionArgs& args) {
  if (absl::Status status = CheckAttentionShape(args.shape); !status.ok()) return status;
  if (args.rows <= 0) return absl::OkStatus();
  const size_t smem = sizeof(float) * (2 * static_cast<size_t>(args.shape.key_dim) +
                                       static_cast<size_t>(args.shape.head_dim) +
                                       2 * static_cast<size_t>(args.shape.feature_dim) + kThreads);
  return LINSERVE_DISPATCH_DTYPE(args.out_dtype, T, [&]() -> absl::Status {
    if (smem > 48 * 1024) {
      LINSERVE_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          DecodeAttentionKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
          static_cast<int>(smem)));
    }
    DecodeAttentionKernel<T><<<dim3(args.shape.heads, args.rows), kThreads, smem, stream>>>(args);
    return LaunchStatus("DecodeAttentionKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
