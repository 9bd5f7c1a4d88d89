// φ for one head vector, computed cooperatively by a whole block (device code, included by the
// attention kernels). x (head_dim floats) and phi (feature_dim floats) live in shared memory;
// favor_plus projects with one warp per random feature so that the rows of W are read
// coalesced. Elementwise maps match the CPU kernels' definitions (docs/architecture.md §4).
#ifndef LINSERVE_KERNELS_CUDA_FEATURE_MAP_CUH_
#define LINSERVE_KERNELS_CUDA_FEATURE_MAP_CUH_

#include <cfloat>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/linear_attention.h"

namespace linserve::cuda {

// Every thread of the block must call this (it contains barriers). `scratch`: 32 shared floats.
// On return phi is complete and visible to the whole block.
__device__ __forceinline__ void BlockFeatureMap(const AttentionShape& shape, const float* x,
                                                float* phi, float* scratch) {
  __syncthreads();  // x was just written by other threads
  const int dh = shape.head_dim;
  const int features = shape.feature_dim;
  switch (shape.feature_map) {
    case FeatureMapKind::kEluPlusOne:
      for (int f = threadIdx.x; f < features; f += blockDim.x) {
        const float v = x[f];
        phi[f] = v > 0.0f ? v + 1.0f : expf(v);
      }
      break;
    case FeatureMapKind::kRelu:
      for (int f = threadIdx.x; f < features; f += blockDim.x) phi[f] = fmaxf(x[f], 0.0f);
      break;
    case FeatureMapKind::kExp: {
      float m = -FLT_MAX;
      for (int i = threadIdx.x; i < dh; i += blockDim.x) m = fmaxf(m, x[i]);
      m = BlockMax(m, scratch, -FLT_MAX);
      for (int f = threadIdx.x; f < features; f += blockDim.x) phi[f] = expf(x[f] - m);
      break;
    }
    case FeatureMapKind::kFavorPlus: {
      float squares = 0.0f;
      for (int i = threadIdx.x; i < dh; i += blockDim.x) squares += x[i] * x[i];
      const float half_norm = 0.5f * BlockSum(squares, scratch);
      const float scale = 1.0f / sqrtf(static_cast<float>(features));
      const int lane = threadIdx.x & 31;
      const int warps = blockDim.x >> 5;
      for (int f = threadIdx.x >> 5; f < features; f += warps) {
        const float* w = shape.favor + static_cast<int64_t>(f) * dh;
        float u = 0.0f;
        for (int i = lane; i < dh; i += 32) u += w[i] * x[i];
        u = WarpSum(u);
        if (lane == 0) phi[f] = expf(u - half_norm) * scale;
      }
      break;
    }
  }
  __syncthreads();
}

// Loads (q, k, v) of one head of one row, bias added, into shared memory.
__device__ __forceinline__ void LoadHeadQkv(const AttentionShape& shape, const float* qkv,
                                            const float* qkv_bias, int64_t row, int head, float* xq,
                                            float* xk, float* xv) {
  const int dh = shape.head_dim;
  const int64_t hd = static_cast<int64_t>(shape.heads) * dh;
  const float* in = qkv + row * 3 * hd + static_cast<int64_t>(head) * dh;
  const float* bias = qkv_bias == nullptr ? nullptr : qkv_bias + static_cast<int64_t>(head) * dh;
  for (int i = threadIdx.x; i < dh; i += blockDim.x) {
    float q = in[i];
    float k = in[hd + i];
    float v = in[2 * hd + i];
    if (bias != nullptr) {
      q += bias[i];
      k += bias[hd + i];
      v += bias[2 * hd + i];
    }
    xq[i] = q;
    xk[i] = k;
    if (xv != nullptr) xv[i] = v;
  }
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_FEATURE_MAP_CUH_
