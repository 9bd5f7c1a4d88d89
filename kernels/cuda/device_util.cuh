// Device-side helpers shared by the kernels: element conversion and block reductions.
//
// Reductions combine values in a fixed order (shuffle butterflies, then one warp over the
// per-warp results), never with floating-point atomics, so every kernel is bitwise reproducible
// from run to run and a CUDA graph replay equals the eager launch it was captured from.
#ifndef LINSERVE_KERNELS_CUDA_DEVICE_UTIL_CUH_
#define LINSERVE_KERNELS_CUDA_DEVICE_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/dtype.h"

namespace linserve::cuda {

template <typename T>
__device__ __forceinline__ float ToFloat(T v);
template <>
__device__ __forceinline__ float ToFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float ToFloat<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float ToFloat<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Round to nearest even, as the CPU-side converters and PyTorch do.
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Every lane gets the same value: at each butterfly step the two partners add the same two
// operands (addition is commutative), so the lanes never diverge.
template <typename T>
__device__ __forceinline__ T WarpSum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T WarpMax(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sum over the whole block, returned to every thread. blockDim.x must be a multiple of 32 and
// at most 1024; `scratch` holds 32 elements of shared memory. Contains __syncthreads(): call it
// from uniform control flow only.
template <typename T>
__device__ __forceinline__ T BlockSum(T v, T* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpSum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return WarpSum(v);
}

template <typename T>
__device__ __forceinline__ T BlockMax(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = blockDim.x >> 5;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return WarpMax(v);
}

// log(1 + e) for e ≥ 0 by Goldberg's identity log(u) · e / (u − 1), u = 1 + e rounded (e where u
// is 1), accurate to a few ulps as log1pf is; log1pf itself has a slow path whose call spills
// registers in the recurrent mixers' kernels.
__device__ __forceinline__ float Log1pOf(float e) {
  const float u = __fadd_rn(1.0f, e);
  return u == 1.0f ? e : __fdiv_rn(__fmul_rn(logf(u), e), __fsub_rn(u, 1.0f));
}

// softplus(x) = log(1 + e^x), x itself above 20 (PyTorch's threshold, as the CPU kernels).
__device__ __forceinline__ float Softplus(float x) { return x > 20.0f ? x : Log1pOf(expf(x)); }

// Dispatches a templated launcher on the element type: LINSERVE_DISPATCH_DTYPE(dtype, T, body)
// runs `body` with T = float, __half or __nv_bfloat16.
#define LINSERVE_DISPATCH_DTYPE(dtype, T, ...) \
  [&]() {                                      \
    switch (dtype) {                           \
      case ::linserve::cuda::DType::kF16: {    \
        using T = __half;                      \
        return __VA_ARGS__();                  \
      }                                        \
      case ::linserve::cuda::DType::kBf16: {   \
        using T = __nv_bfloat16;               \
        return __VA_ARGS__();                  \
      }                                        \
      case ::linserve::cuda::DType::kF32:      \
      default: {                               \
        using T = float;                       \
        return __VA_ARGS__();                  \
      }                                        \
    }                                          \
  }()

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_DEVICE_UTIL_CUH_
