// φ for one head vector, computed cooperatively by a whole block (device code, included by the
// attention kernels). x (key_dim floats) and phi (feature_dim floats) live in shared memory;
// favor_plus projects with one warp per random feature so that the rows of W are read
// coalesced; taylor writes one feature per thread (the products x_i x_j of its second-order
// part straight from shared memory). The maps follow the CPU kernels' definitions
// (docs/architecture.md §4); taylor's φ is bitwise cpu::TaylorFeatureMap's.
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
  const int dk = shape.key_dim;
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
      for (int i = threadIdx.x; i < dk; i += blockDim.x) m = fmaxf(m, x[i]);
      m = BlockMax(m, scratch, -FLT_MAX);
      for (int f = threadIdx.x; f < features; f += blockDim.x) phi[f] = expf(x[f] - m);
      break;
    }
    case FeatureMapKind::kFavorPlus: {
      float squares = 0.0f;
      for (int i = threadIdx.x; i < dk; i += blockDim.x) squares += x[i] * x[i];
      const float half_norm = 0.5f * BlockSum(squares, scratch);
      const float scale = 1.0f / sqrtf(static_cast<float>(features));
      const int lane = threadIdx.x & 31;
      const int warps = blockDim.x >> 5;
      for (int f = threadIdx.x >> 5; f < features; f += warps) {
        const float* w = shape.favor + static_cast<int64_t>(f) * dk;
        float u = 0.0f;
        for (int i = lane; i < dk; i += 32) u += w[i] * x[i];
        u = WarpSum(u);
        if (lane == 0) phi[f] = expf(u - half_norm) * scale;
      }
      break;
    }
    case FeatureMapKind::kTaylor: {
      // The scales as cpu::TaylorFeatureMap rounds them (from double), so that φ is the same.
      const float linear = static_cast<float>(1.0 / pow(static_cast<double>(dk), 0.25));
      const float quadratic =
          static_cast<float>(1.0 / (sqrt(2.0) * sqrt(static_cast<double>(dk))));
      for (int f = threadIdx.x; f < features; f += blockDim.x) {
        if (f == 0) {
          phi[f] = 1.0f;
        } else if (f <= dk) {
          phi[f] = x[f - 1] * linear;
        } else {
          const int p = f - 1 - dk;
          phi[f] = x[p / dk] * quadratic * x[p % dk];
        }
      }
      break;
    }
  }
  __syncthreads();
}

// Loads (q, k, v) of one head of one row, bias added, into shared memory: xq and xk key_dim
// floats, xv head_dim floats (skipped when null).
__device__ __forceinline__ void LoadHeadQkv(const AttentionShape& shape, const float* qkv,
                                            const float* qkv_bias, int64_t row, int head, float* xq,
                                            float* xk, float* xv) {
  const int dk = shape.key_dim;
  const int dh = shape.head_dim;
  const int64_t hk = static_cast<int64_t>(shape.heads) * dk;
  const int64_t hd = static_cast<int64_t>(shape.heads) * dh;
  const float* in = qkv + row * (2 * hk + hd);
  const int64_t q0 = static_cast<int64_t>(head) * dk;
  const int64_t v0 = 2 * hk + static_cast<int64_t>(head) * dh;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) {
    float q = in[q0 + i];
    float k = in[hk + q0 + i];
    if (qkv_bias != nullptr) {
      q += qkv_bias[q0 + i];
      k += qkv_bias[hk + q0 + i];
    }
    xq[i] = q;
    xk[i] = k;
  }
  if (xv == nullptr) return;
  for (int i = threadIdx.x; i < dh; i += blockDim.x) {
    xv[i] = in[v0 + i] + (qkv_bias != nullptr ? qkv_bias[v0 + i] : 0.0f);
  }
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_FEATURE_MAP_CUH_
