// Bias + activation after the first FFN GEMM: the GEMM writes fp32 without bias, this kernel
// adds the bias, applies gelu (erf) / gelu_tanh / relu in fp32 and writes the second GEMM's
// input in the weights' type, so the d_ff-wide intermediate is read once and written once at
// half width. (cuBLASLt's GELU epilogue is the tanh approximation only, and the erf form is the
// model's default, so the epilogue cannot replace this.) A flat grid-stride loop: the work is
// purely elementwise and memory-bound.
#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

// Written with _rn intrinsics in the CPU kernels' order of operations (they are built without
// FMA contraction), so that only erff/tanhf themselves differ from the CPU's.
__device__ __forceinline__ float Activate(float x, ActivationKind activation) {
  switch (activation) {
    case ActivationKind::kGelu: {
      const float e = erff(__fmul_rn(x, 0.70710678118654752f));
      return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, e));
    }
    case ActivationKind::kGeluTanh: {
      constexpr float kSqrt2OverPi = 0.79788456080286536f;
      const float x3 = __fmul_rn(__fmul_rn(x, x), x);
      const float inner = __fmul_rn(kSqrt2OverPi, __fadd_rn(x, __fmul_rn(0.044715f, x3)));
      return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
    }
    case ActivationKind::kRelu:
      return x > 0.0f ? x : 0.0f;
  }
  return x;
}

template <typename T>
__global__ void BiasActivationKernel(const float* __restrict__ in, const float* __restrict__ bias,
                                     int64_t rows, int64_t cols, ActivationKind activation,
                                     T* __restrict__ out) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = in[i];
    if (bias != nullptr) v = __fadd_rn(v, bias[i % cols]);
    out[i] = FromFloat<T>(Activate(v, activation));
  }
}

}  // namespace

absl::Status LaunchBiasActivation(cudaStream_t stream, const float* in, const float* bias,
                                  int64_t rows, int64_t cols, ActivationKind activation,
                                  DType dtype, void* out) {
  const int64_t n = rows * cols;
  if (n <= 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 8192);
  return LINSERVE_DISPATCH_DTYPE(dtype, T, [&] {
    BiasActivationKernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        in, bias, rows, cols, activation, static_cast<T*>(out));
    return LaunchStatus("BiasActivationKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
