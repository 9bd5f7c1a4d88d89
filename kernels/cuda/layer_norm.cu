// Residual add + LayerNorm, fused: r = x + delta + bias is formed, optionally stored as the new
// residual, and normalised in the same kernel, so the output of every attention/FFN GEMM is read
// once and the normalised row is written directly in the next GEMM's input type. One block per
// row; the mean and the two-pass variance are accumulated in double with the fixed-order
// BlockSum, as the CPU kernel does (the residual stream grows with depth), so results are
// reproducible and match the CPU backend to rounding. Rows are not staged in shared memory (d_model
// may be 65536): the second and third passes re-read r from L1/L2, which holds a row comfortably.
// In place is safe: each thread reads and writes only its own columns, and all reads of the
// statistics passes finish (barriers inside BlockSum) before the output pass writes.
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads) AddLayerNormKernel(AddLayerNormArgs args) {
  __shared__ double scratch[32];
  const int d = args.d;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * d;
  const float* x = args.x + offset;
  const float* delta = args.delta == nullptr ? nullptr : args.delta + offset;
  float* sum_out = args.sum_out == nullptr ? nullptr : args.sum_out + offset;

  // x + (delta + bias), the order in which the CPU backend's Linear accumulates a projection
  // with its bias into the residual stream.
  auto residual = [&](int c) {
    if (delta == nullptr) return x[c];
    float update = delta[c];
    if (args.delta_bias != nullptr) update = __fadd_rn(update, args.delta_bias[c]);
    return __fadd_rn(x[c], update);
  };

  double local = 0.0;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const float r = residual(c);
    if (sum_out != nullptr) sum_out[c] = r;
    local += r;
  }
  const double mean = BlockSum(local, scratch) / static_cast<double>(d);
  // After this point x may have been overwritten through sum_out; read r back from there.
  auto stored = [&](int c) { return sum_out != nullptr ? sum_out[c] : residual(c); };

  double squares = 0.0;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const double centred = stored(c) - mean;
    squares += centred * centred;
  }
  const double variance = BlockSum(squares, scratch) / static_cast<double>(d);
  const float mean_f = static_cast<float>(mean);
  const float inv_std = static_cast<float>(1.0 / sqrt(variance + static_cast<double>(args.eps)));

  float* y = args.y == nullptr ? nullptr : args.y + offset;
  T* y_t = args.y_t == nullptr ? nullptr : static_cast<T*>(args.y_t) + offset;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    // Unfused, in the CPU kernel's order (it is built with -ffp-contract=off).
    const float v = __fadd_rn(
        __fmul_rn(__fmul_rn(__fsub_rn(stored(c), mean_f), inv_std), args.gamma[c]), args.beta[c]);
    if (y != nullptr) y[c] = v;
    if (y_t != nullptr) y_t[c] = FromFloat<T>(v);
  }
}

}  // namespace

absl::Status LaunchAddLayerNorm(cudaStream_t stream, const AddLayerNormArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.dtype, T, [&] {
    AddLayerNormKernel<T><<<args.rows, kThreads, 0, stream>>>(args);
    return LaunchStatus("AddLayerNormKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
