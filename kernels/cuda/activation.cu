// Bias + activation after the first MLP GEMM: the GEMM writes fp32 without bias, these kernels
// add the bias, apply the activation in fp32 and write the second GEMM's input in the weights'
// type, so the d_ff-wide intermediate is read once and written once at half width. (cuBLASLt's
// GELU epilogue is the tanh approximation only, and the erf form is the model's default, so the
// epilogue cannot replace this.) The ffn's is a flat grid-stride loop; the gated MLP's (value ⊙
// act(gate), the two halves of one fc1 row) strides over rows in y and columns in x, so that a
// block streams a contiguous run of both halves without a division per element. Both are purely
// elementwise and memory-bound. At a few rows of 16-bit weights the small-batch linear layer
// computes the same values in its epilogue instead (Gemm::LinearActivation), one launch fewer.
#include <algorithm>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

template <typename T>
__global__ void BiasActivationKernel(const float* __restrict__ in, const float* __restrict__ bias,
                                     int64_t rows, int64_t cols, ActivationKind activation,
                                     T* __restrict__ out) {
  AfterPriorKernel();
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = FromFloat<T>(BiasActivate(in[i], bias, i % cols, activation));
  }
}

template <typename T>
__global__ void BiasGateKernel(const float* __restrict__ in, const float* __restrict__ bias,
                               int64_t rows, int64_t width, ActivationKind activation,
                               T* __restrict__ out) {
  AfterPriorKernel();
  const int64_t column_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* value = in + r * 2 * width;
    const float* gate = value + width;
    T* out_row = out + r * width;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < width;
         c += column_stride) {
      out_row[c] = FromFloat<T>(BiasGate(value[c], gate[c], bias, c, width, activation));
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
    LaunchDependent(BiasActivationKernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream, in,
                    bias, rows, cols, activation, static_cast<T*>(out));
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
    LaunchDependent(BiasGateKernel<T>, grid, kThreads, 0, stream, in, bias, rows, width, activation,
                    static_cast<T*>(out));
    return LaunchStatus("BiasGateKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
