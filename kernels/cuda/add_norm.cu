// Residual add + norm (LayerNorm or RMSNorm), fused: r = x + delta + bias is formed, optionally
// stored as the new residual, and normalised in the same kernel, so the output of every
// mixer/MLP GEMM is read once and the normalised row is written directly in the next GEMM's
// input type. One block per row; the statistics (LayerNorm: the mean, then the two-pass
// variance; RMSNorm: the mean of the squares) are accumulated in double with the fixed-order
// BlockSum, as the CPU kernels do (the residual stream grows with depth), so results are
// reproducible and match the CPU backend to rounding. Rows are not staged in shared memory (d_model
// may be 65536): the later passes re-read r from L1/L2, which holds a row comfortably.
// In place is safe: each thread reads and writes only its own columns, and all reads of the
// statistics passes finish (barriers inside BlockSum) before the output pass writes.
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/elementwise.h"

namespace linserve::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T, NormType kNorm>
__global__ void __launch_bounds__(kThreads) AddNormKernel(AddNormArgs args) {
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

  // LayerNorm: Σ r; RMSNorm: Σ r² (the product in double, as the CPU kernel forms it).
  double local = 0.0;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const float r = residual(c);
    if (sum_out != nullptr) sum_out[c] = r;
    local += kNorm == NormType::kLayerNorm ? static_cast<double>(r)
                                           : static_cast<double>(r) * static_cast<double>(r);
  }
  const double moment = BlockSum(local, scratch) / static_cast<double>(d);
  // After this point x may have been overwritten through sum_out; read r back from there.
  auto stored = [&](int c) { return sum_out != nullptr ? sum_out[c] : residual(c); };

  float mean_f = 0.0f;
  float inv_std;
  if constexpr (kNorm == NormType::kLayerNorm) {
    double squares = 0.0;
    for (int c = threadIdx.x; c < d; c += blockDim.x) {
      const double centred = stored(c) - moment;
      squares += centred * centred;
    }
    const double variance = BlockSum(squares, scratch) / static_cast<double>(d);
    mean_f = static_cast<float>(moment);
    inv_std = static_cast<float>(1.0 / sqrt(variance + static_cast<double>(args.eps)));
  } else {
    inv_std = static_cast<float>(1.0 / sqrt(moment + static_cast<double>(args.eps)));
  }

  float* y = args.y == nullptr ? nullptr : args.y + offset;
  T* y_t = args.y_t == nullptr ? nullptr : static_cast<T*>(args.y_t) + offset;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    // Unfused, in the CPU kernels' order (they are built with -ffp-contract=off).
    float v;
    if constexpr (kNorm == NormType::kLayerNorm) {
      v = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(stored(c), mean_f), inv_std), args.gamma[c]),
                    args.beta[c]);
    } else {
      v = __fmul_rn(__fmul_rn(stored(c), inv_std), args.gamma[c]);
    }
    if (y != nullptr) y[c] = v;
    if (y_t != nullptr) y_t[c] = FromFloat<T>(v);
  }
}

}  // namespace

absl::Status LaunchAddNorm(cudaStream_t stream, const AddNormArgs& args) {
  if (args.rows <= 0) return absl::OkStatus();
  return LINSERVE_DISPATCH_DTYPE(args.dtype, T, [&] {
    if (args.norm == NormType::kLayerNorm) {
      AddNormKernel<T, NormType::kLayerNorm><<<args.rows, kThreads, 0, stream>>>(args);
    } else {
      AddNormKernel<T, NormType::kRmsNorm><<<args.rows, kThreads, 0, stream>>>(args);
    }
    return LaunchStatus("AddNormKernel", __FILE__, __LINE__);
  });
}

}  // namespace linserve::cuda
