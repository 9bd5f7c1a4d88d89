// The MLP activations in device code, shared by the elementwise kernels (activation.cu) and the
// small-batch linear layer's fused epilogue (small_batch_linear.cu), so that both paths compute
// bitwise the same hidden rows.
#ifndef LINSERVE_KERNELS_CUDA_ACTIVATION_CUH_
#define LINSERVE_KERNELS_CUDA_ACTIVATION_CUH_

#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {

// 1 / (1 + exp(−x))
__device__ __forceinline__ float Sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

// Written with _rn intrinsics in the CPU kernels' order of operations (they are built without
// FMA contraction), so that only erff/tanhf/expf themselves differ from the CPU's.
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
    case ActivationKind::kSilu:
      return __fmul_rn(x, Sigmoid(x));
    case ActivationKind::kSigmoid:
      return Sigmoid(x);
  }
  return x;
}

// One hidden value of the MLP from fc1's fp32 product(s): act(v + bias) (kActivation), or
// act(gate + gate_bias) · (value + value_bias) (kGate, the CPU's GatedProduct's order).
__device__ __forceinline__ float BiasActivate(float v, const float* bias, int64_t c,
                                              ActivationKind activation) {
  if (bias != nullptr) v = __fadd_rn(v, bias[c]);
  return Activate(v, activation);
}
__device__ __forceinline__ float BiasGate(float v, float g, const float* bias, int64_t c,
                                          int64_t width, ActivationKind activation) {
  if (bias != nullptr) {
    v = __fadd_rn(v, bias[c]);
    g = __fadd_rn(g, bias[width + c]);
  }
  return __fmul_rn(Activate(g, activation), v);
}

}  // namespace linserve::cuda

#endif  // LINSERVE_KERNELS_CUDA_ACTIVATION_CUH_
