// Bias + activation after the first MLP GEMM: the GEMM writes fp32 without bias, these kernels
// add the bias, apply the activation in fp32 and write the second GEMM's input in the weights'
// type, so the d_ff-wide intermediate is read once and written once at half width. (cuBLASLt's
// GELU epilogue is the tanh approximation only, and the erf form is the model's default, so the
// epilogue cannot replace this.) The ffn's is a flat grid-stride loop; the gated MLP's (value ⊙
// act(gate), the two halves of one fc1 row) strides over rows in y and columns in x, so that a
// block streams a contiguous run of both halves without a division per element. Both are purely
// elementwise and memory-bound.
#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

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

template <typename T>
__global__ void BiasGateKernel(const float* __restrict__ in, const float* __restrict__ bias,
                               int64_t rows, int64_t width, ActivationKind activation,
                               T* __restrict__ out) {
  const int64_t column_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* value = in + r * 2 * width;
    const float* gate = value + width;
    T* out_row = out + r * width;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
         c += column_stride) {
      float v = value[c];
      float g = gate[c];
      if (bias != nullptr) {
        v = __fadd_rn(v, bias[c]);
        g = __fadd_rn(g, bias[width + c]);
      }
      // act(gate) · value, the CPU's GatedProduct's order.
      out_row[c] = FromFloat<T>(__fmul_rn(Activate(g, activation), v));
    }
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

absl::Status LaunchBiasGate(cudaStream_t stream, const float* in, const float* bias, int64_t rows,
                            int64_t width, ActivationKind activation, DType dtype, void* out) {
  if (rows <= 0 || width <= 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((width + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  return LINSERVE_DISPATCH_DTYPE(dtype, T, [&] {
    BiasGateKernel<T>
        <<<grid, kThreads, 0, stream>>>(in, bias, rows, width, activation, static_cast<T*>(out));
    return LaunchStatus("BiasGateKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
